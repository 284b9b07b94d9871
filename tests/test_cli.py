"""The `rmq` CLI contract: --help everywhere, config errors, store inspect, bench store --json."""
from __future__ import annotations

import json
import os
import subprocess

import pytest
from click.testing import CliRunner

from rmq.cli import main
from rmq.config import ConfigError, load_config
from rmq.store import DefaultMessageStore, Message

from .conftest import small_config


def test_every_command_has_help():
    runner = CliRunner()
    for args in (["--help"], ["up", "--help"], ["store", "--help"], ["store", "inspect", "--help"],
                 ["bench", "--help"], ["bench", "store", "--help"]):
        res = runner.invoke(main, args)
        assert res.exit_code == 0 and "Usage:" in res.output, args


def test_version_comes_from_the_package_metadata():
    from importlib.metadata import version
    res = CliRunner().invoke(main, ["--version"])
    assert res.exit_code == 0 and res.output == f"rmq {version('rmq-bridge')}\n"


def test_config_errors_name_file_key_and_expectation(tmp_path):
    p = tmp_path / "broker.yaml"
    p.write_text("flushDiskType: SYNC_FLUSH\nmessageDelayLevel: \"1s 5s\"\nmappedFileSizeCommitLog: 8388608\n")
    cfg = load_config(str(p))
    assert cfg.store.flushDiskType == "SYNC_FLUSH" and cfg.store.delay_levels_ms == [1000, 5000]
    p.write_text("flushDiskTyp: SYNC_FLUSH\n")
    with pytest.raises(ConfigError, match=r"broker.yaml: unknown key 'flushDiskTyp' \(did you mean 'flushDiskType'\?\)"):
        load_config(str(p))
    p.write_text("mappedFileSizeCommitLog: big\n")
    with pytest.raises(ConfigError, match="key 'mappedFileSizeCommitLog': expected an integer, got 'big'"):
        load_config(str(p))
    p.write_text("flushDiskType: FAST\n")
    with pytest.raises(ConfigError, match="flushDiskType: expected one of ASYNC_FLUSH, SYNC_FLUSH"):
        load_config(str(p))
    p.write_text("- a\n- b\n")
    with pytest.raises(ConfigError, match="expected a mapping"):
        load_config(str(p))
    res = CliRunner().invoke(main, ["up", "--config", str(tmp_path / "missing.yaml")])
    assert res.exit_code != 0 and "missing.yaml: no such file" in res.output


@pytest.fixture
def sample_store(tmp_path):
    root = str(tmp_path / "store")
    s = DefaultMessageStore(small_config(root)).load().start()
    s.put_message(Message("TopicTest", b"Hello RocketMQ", queue_id=1, properties={"TAGS": "TagA", "KEYS": "OrderID188"}))
    s.put_message(Message("TopicTest", b"second", queue_id=1, properties={"TAGS": "TagB", "KEYS": "Aa"}))
    s.put_message(Message("TopicTest", b"third", queue_id=0, properties={"KEYS": "BB"}))
    s.shutdown()
    return root


def test_store_inspect_text_shows_units_queues_index_and_chain(sample_store):
    res = CliRunner().invoke(main, ["store", "inspect", sample_store, "--topic", "TopicTest", "--key", "Aa"])
    assert res.exit_code == 0, res.output
    out = res.output
    assert "MAGICCODE                    MESSAGE_MAGIC_CODE" in out
    assert "TOPIC                        TopicTest" in out
    assert "TopicTest/1: offsets [0, 2)" in out
    assert "#0      -> commitlog @0" in out and "tagsCode = hash(TAGS)" in out
    assert "chain for 'TopicTest#Aa'" in out and "[match]" in out and "collision" in out
    assert "commitlog: 1 file(s), 3 message units" in out


def test_store_inspect_json_and_bad_dirs(sample_store, tmp_path):
    res = CliRunner().invoke(main, ["store", "inspect", sample_store, "consumequeue", "--json"])
    rep = json.loads(res.output)
    q1 = [q for q in rep["consumequeue"]["queues"] if q["queueId"] == 1][0]
    assert [u["commitLogOffset"] for u in q1["units"]] == [0, 140] and q1["mismatches"] == 0
    res = CliRunner().invoke(main, ["store", "inspect", str(tmp_path)])
    assert res.exit_code != 0 and "not a RocketMQ store" in res.output
    res = CliRunner().invoke(main, ["store", "inspect", str(tmp_path / "nope")])
    assert res.exit_code != 0 and "no such directory" in res.output


def test_store_inspect_reports_corrupt_unit(sample_store):
    path = os.path.join(sample_store, "commitlog", "0" * 20)
    with open(path, "r+b") as fh:
        fh.seek(140 + 4)
        fh.write(b"\x12\x34\x56\x78")  # the second unit's magic code
    res = CliRunner().invoke(main, ["store", "inspect", sample_store, "commitlog"])
    assert res.exit_code == 1 and "CORRUPT" in res.output and "offset 140" in res.output
    assert "problems: 1 -- the store is CORRUPT" in res.output


def test_store_inspect_of_random_bytes_is_corruption(tmp_path):
    """A 'store' of random bytes: every section says corrupt, no absurd counts, exit 1."""
    import random
    rnd = random.Random(7)
    root = tmp_path / "junk"
    for rel in ("commitlog/" + "0" * 20, "consumequeue/T/0/" + "0" * 20, "index/20260101000000000"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(bytes(rnd.randrange(256) for _ in range(3000)))
    res = CliRunner().invoke(main, ["store", "inspect", str(root)])
    assert res.exit_code == 1, res.output
    out = res.output
    assert " 0 mismatch(es)" not in out and "index: 1 file(s), 0 entries" in out
    problems = [ln for ln in out.splitlines() if ln.startswith("    - ")]
    assert any(p.startswith("    - commitlog:") for p in problems)
    assert any(p.startswith("    - consumequeue T/0:") for p in problems)
    assert any(p.startswith("    - index 20260101000000000: indexCount ") for p in problems)
    assert "consumequeue: 1 queue(s), 150 units, 150 mismatch(es)" in out
    rep = json.loads(CliRunner().invoke(main, ["store", "inspect", str(root), "--json"]).output.split("\nError:")[0])
    assert len(rep["problems"]) >= 3


def test_store_inspect_counts_only_the_topic_asked_for(sample_store):
    s = DefaultMessageStore(small_config(sample_store)).load().start()
    for i in range(5):
        s.put_message(Message("Other", b"o%d" % i))
    s.shutdown()
    res = CliRunner().invoke(main, ["store", "inspect", sample_store, "commitlog", "--topic", "TopicTest",
                                    "--limit", "1"])
    assert res.exit_code == 0, res.output
    assert "... 2 more message units of topic TopicTest (use --limit)" in res.output
    res = CliRunner().invoke(main, ["store", "inspect", sample_store, "commitlog", "--topic", "TopicTest",
                                    "--limit", "0"])
    assert res.exit_code == 0 and "more message units" not in res.output
    assert res.output.count("TOPIC                        TopicTest") == 3 and "Other" in res.output  # summary


def test_store_inspect_accepts_one_file_of_a_store(sample_store, tmp_path):
    cl = os.path.join(sample_store, "commitlog", "0" * 20)
    res = CliRunner().invoke(main, ["store", "inspect", cl])
    assert res.exit_code == 0, res.output
    assert f"(only the file {'0' * 20})" in res.output and "== consumequeue" not in res.output
    assert "commitlog: 1 file(s), 3 message units" in res.output
    cq = os.path.join(sample_store, "consumequeue", "TopicTest", "1", "0" * 20)
    res = CliRunner().invoke(main, ["store", "inspect", cq])
    assert res.exit_code == 0, res.output
    assert "TopicTest/1: offsets [0, 2)" in res.output and "TopicTest/0" not in res.output
    idx = os.path.join(sample_store, "index", os.listdir(os.path.join(sample_store, "index"))[0])
    res = CliRunner().invoke(main, ["store", "inspect", idx, "--topic", "TopicTest", "--key", "Aa"])
    assert res.exit_code == 0, res.output
    assert "chain for 'TopicTest#Aa'" in res.output and "== commitlog" not in res.output
    res = CliRunner().invoke(main, ["store", "inspect", cl, "index"])
    assert res.exit_code != 0 and "is a commitlog file; it has no index section" in res.output
    plain = tmp_path / "notes.txt"
    plain.write_text("hello")
    res = CliRunner().invoke(main, ["store", "inspect", str(plain)])
    assert res.exit_code != 0 and "a file, but not one inside a store's commitlog/" in res.output


def test_bench_store_json_prints_required_figures(tmp_path):
    res = CliRunner().invoke(main, ["bench", "store", "--count", "2000", "--size", "100", "--json",
                                    "--data", str(tmp_path)])
    assert res.exit_code == 0, res.output
    fig = json.loads(res.output)
    for key in ("msgs_per_s", "mb_per_s", "p50_us", "p99_us", "peak_rss_mb", "raw_mb_per_s", "ratio_to_raw"):
        assert key in fig and fig[key] > 0, key
    assert fig["count"] == 2000 and not fig["errors"]
    res = CliRunner().invoke(main, ["bench", "store", "--count", "0"])
    assert res.exit_code != 0 and "--count" in res.output


def test_rmq_console_script_runs():
    out = subprocess.run(["rmq", "--help"], capture_output=True, text=True, env={**os.environ,
                         "PATH": os.path.dirname(__import__("sys").executable) + os.pathsep + os.environ["PATH"]})
    assert out.returncode == 0 and "store" in out.stdout


def test_bench_kafka_from_a_directory_holding_an_rmq_folder_streams_progress(tmp_path):
    """The child broker cannot be shadowed by ./rmq (the README once left one there), and the bench
    says what it is doing as it goes (stderr), not only at the end."""
    import subprocess
    import sys
    shadow = tmp_path / "rmq"
    shadow.mkdir()
    (shadow / "__init__.py").write_text("raise ImportError('the local rmq/ folder shadowed the package')\n")
    (shadow / "cli.py").write_text("raise SystemExit('the local rmq/ folder shadowed the package')\n")
    rmq_bin = os.path.join(os.path.dirname(sys.executable), "rmq")
    proc = subprocess.run([rmq_bin, "bench", "kafka", "--count", "2000", "--latency-count", "20", "--json"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    fig = json.loads(proc.stdout)
    assert fig["broker"]["consumed"] == 2000 and fig["broker"]["produce_msgs_per_s"] > 0
    progress = [ln.split("] ", 1)[1] for ln in proc.stderr.splitlines() if ln.startswith("[")]
    assert progress[0] == "starting an embedded rmq up"
    assert progress[1].startswith("rmq listening on 127.0.0.1:")
    assert progress[2].startswith("rmq (embedded): producing 2,000 x 100 B to bench")
    assert progress[3].startswith("rmq (embedded): produced in ") and progress[-1] == "rmq (embedded): done"


def test_bench_topics_reports_rates_and_the_mechanism(tmp_path):
    """rmq bench topics: one fresh broker per row, first and warm pass, and the broker's own
    figures; CreateTopics answers once the queue files exist, so the first pass creates none."""
    import subprocess
    import sys
    rmq_bin = os.path.join(os.path.dirname(sys.executable), "rmq")
    proc = subprocess.run([rmq_bin, "bench", "topics", "--topics", "2,6", "--partitions", "4", "--count", "2000",
                           "--size", "256", "--json"], cwd=tmp_path, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(proc.stdout)
    assert [(r["topics"], r["queues"]) for r in res["rows"]] == [(2, 8), (6, 24)]
    for r in res["rows"]:
        for phase in ("first", "warm"):
            assert r["rmq"][phase]["msgs_per_s"] > 0
            mech = r["rmq"][phase]["mechanism"]
            assert mech["queues"] >= r["queues"] and mech["cq_files"] >= r["queues"]
            # the queue files were made at CreateTopics: a pass creates at most the commitlog's and
            # the index's first files, never one per queue
            assert mech["files_created"] <= (2 if phase == "first" else 0), (phase, mech)
    assert res["rows"][0]["rmq_first_vs_smallest"] == 1.0
    res = subprocess.run([rmq_bin, "bench", "topics", "--topics", "8,x"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and "--topics" in res.stderr and "'8,x'" in res.stderr
    res = subprocess.run([rmq_bin, "bench", "topics", "--protocol", "rocketmq", "--vs", "tansu"], capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 2 and "Tansu speaks only the Kafka protocol" in res.stderr


def test_bench_topics_rocketmq_protocol(tmp_path):
    """The RocketMQ-protocol rows: stock C++ producers in their own processes, every send counted,
    and the queues made when the topics were created, not by the first sends."""
    import subprocess
    import sys
    rmq_bin = os.path.join(os.path.dirname(sys.executable), "rmq")
    proc = subprocess.run([rmq_bin, "bench", "topics", "--protocol", "rocketmq", "--topics", "3", "--partitions", "2",
                           "--producers", "2", "--rocketmq-count", "60", "--size", "100", "--json"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(proc.stdout)
    (row,) = res["rows"]
    assert "rmq" not in row and row["rocketmq_first_vs_smallest"] == 1.0
    for phase in ("first", "warm"):
        r = row["rocketmq"][phase]
        assert r["failed"] == 0 and r["msgs_per_s"] > 0
        assert r["mechanism"]["queues"] >= 6 and r["mechanism"]["files_created"] <= (2 if phase == "first" else 0)
