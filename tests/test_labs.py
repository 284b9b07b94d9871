"""The lab runner (`rmq lab`): every shipped lab runs with --quick and writes its results, plots and
reports, with a verdict computed from the measured numbers; lab files are validated with clear
errors; an OpenMessaging Benchmark workload file runs unchanged; a system that fails is reported
with its log tail while the others' results are kept."""
from __future__ import annotations

import json
import os

import pytest
from click.testing import CliRunner

from labs.cli import lab as lab_cmd
from labs.runner import LabError, lab_files, load_lab
from labs.verdict import fmt_range

LABS = [f.stem for f in lab_files()]


@pytest.fixture(autouse=True)
def _smoke_quick_runs(monkeypatch):
    """These runs check that every lab runs, measures and reports; 1 s measured per point keeps the
    suite short (a user's --quick measures 5 s, labs.runner.quick_seconds)."""
    monkeypatch.setenv("RMQ_LAB_QUICK_SECONDS", "1")


def run_cli(*args):
    return CliRunner().invoke(lab_cmd, list(args), catch_exceptions=False)


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    """`rmq lab run NAME --quick`, once per lab in this module: (output directory, CLI result)."""
    runs: dict = {}

    def run(name):
        if name not in runs:
            out = tmp_path_factory.mktemp("lab") / name
            n = 2 if name == "key-lookup" else 1  # one lab shows the repeats; one repeat elsewhere keeps the suite short
            runs[name] = (out, run_cli("run", name, "--quick", "--repeats", str(n), "--out", str(out)))
        return runs[name]
    return run


@pytest.mark.parametrize("name", LABS)
def test_every_lab_runs_quick_with_a_measured_verdict(name, quick_run):
    out, res = quick_run(name)
    assert res.exit_code == 0, res.output
    doc = json.loads((out / "results.json").read_text())
    for f in ("results.csv", "report.md", "report.html", f"plot-{doc['lab']['verdict']['metric']}.png"):
        assert (out / f).stat().st_size > 0, f
    assert all(r["status"] == "ok" for r in doc["results"]), doc["results"]
    n = 2 if name == "key-lookup" else 1
    assert doc["repeats"] == n and {r["repeat"] for r in doc["results"]} == set(range(1, n + 1))
    v = doc["verdict"]
    # unreliable: a timed figure measured while the machine was starved (labs.starvation), as the suite's
    # parallel workers on 2 cores can make it
    assert v["outcome"] in ("holds", "does not hold", "inconclusive", "unreliable") and v["text"] in res.output
    assert all("starved" in r and "cpuWaitSeconds" in r and "cpuSeconds" in r for r in doc["results"])
    if v["outcome"] == "unreliable":                    # only ever because a compared run was starved
        assert any(r["starved"] for r in doc["results"]), doc["results"]
    if doc["lab"]["quick"].get("shareBroker"):          # one broker per broker config served every point
        assert all(r.get("sharedBroker") for r in doc["results"])
    metric = doc["lab"]["verdict"]["metric"]
    for r in doc["results"]:
        assert isinstance(r[metric], (int, float)) and r[metric] >= 0
    if doc["lab"]["verdict"]["kind"] != "falloff":   # the verdict quotes the medians and ranges it was decided on
        for point, systems in v["numbers"].items():
            for system, n in systems.items():
                vals = [r[metric] for r in doc["results"] if r["system"] == system and str(r["sweep_value"]) == point]
                assert sorted(n["values"]) == sorted(vals)
                assert f"{system} {fmt_range(n['median'], n['min'], n['max'])}" in v["text"]
    else:
        for system, n in v["numbers"].items():
            assert f"{system} keeps {fmt_range(n['median'], n['min'], n['max'])}" in v["text"]
    html = (out / "report.html").read_text()
    assert "data:image/png;base64," in html and doc["lab"]["question"].split()[0] in html
    assert all("files_written" in r["mechanism"] and r["mechanism"]["open_fds"] > 0 for r in doc["results"])


OMB_WORKLOAD = """#
# Licensed under the Apache License, Version 2.0 (the "License");
#

name: 1 producer / 1 consumers on 1 topic

topics: 1
partitionsPerTopic: 16
messageSize: 1024
payloadFile: "payload/payload-1Kb.data"
subscriptionsPerTopic: 1
consumerPerSubscription: 1
producersPerTopic: 1
producerRate: 50000
consumerBacklogSizeGB: 0
testDurationMinutes: 15
"""


@pytest.mark.parametrize("systems, drivers", [
    (["kafka-bridge", "kafka-log"], ["kafka (confluent-kafka)"] * 2),
    (["rocketmq", "rocketmq-cpp"], ["rocketmq (rmq.client, autoBatch)", "rocketmq (rocketmq 0.4.4 C++ client)"]),
])
def test_an_omb_workload_file_runs_unchanged(tmp_path, systems, drivers):
    wl = tmp_path / "1-topic-16-partitions-1kb.yaml"
    wl.write_text(OMB_WORKLOAD)
    out = tmp_path / "out"
    res = run_cli("run", str(wl), "--quick", "--repeats", "1", "--systems", ",".join(systems), "--out", str(out))
    assert res.exit_code == 0, res.output
    doc = json.loads((out / "results.json").read_text())
    assert [r["system"] for r in doc["results"]] == systems
    assert doc["verdict"]["outcome"] is None and "not a claim" in doc["verdict"]["text"]    # a workload, no verdict
    assert [r.get("driver") for r in doc["results"]] == drivers, doc["results"]
    for r in doc["results"]:
        assert r["partitions"] == 16 and r["messageSize"] == 1024
        # the subscription read what the measured phase sent, and no more (warm-up records are not counted);
        # the last few ms of sends may still be in flight when a 1 s smoke phase ends
        assert r["messagesAcked"] * 0.95 <= r["messagesReceived"] <= r["messagesSent"]
        for key in ("publishRate", "consumeRate", "backlog", "aggregatedPublishLatency99pct",
                    "aggregatedEndToEndLatency99pct"):                # OMB's result fields
            assert key in r
        assert r["messagesAcked"] == r["messagesSent"] > 0 and sum(r["publishRate"]) > 0


def test_omb_clients_in_their_own_processes_with_cpu_per_message(tmp_path):
    """producerProcesses and consumerProcesses (the rocketmq-vs-kafka-bridge layout): both client kinds
    send from a spawned process and read in another, every record sent is read once, and the result
    gives the CPU per message of the broker and of each kind of client process."""
    import yaml
    lab = {"name": "omb-procs", "title": "t", "question": "q", "source": {"seed": "-", "section": "s"},
           "claim": "(a workload, not a claim)", "systems": ["kafka-bridge", "rocketmq"],
           "workload": yaml.safe_load(OMB_WORKLOAD) | {"producerRate": 2000},
           "conditions": {"producerProcesses": 1, "consumerProcesses": True}, "verdict": None}
    p = tmp_path / "lab.yaml"
    p.write_text(yaml.safe_dump(lab))
    out = tmp_path / "out"
    res = run_cli("run", str(p), "--quick", "--repeats", "1", "--out", str(out))
    assert res.exit_code == 0, res.output
    doc = json.loads((out / "results.json").read_text())
    assert [r["status"] for r in doc["results"]] == ["ok", "ok"], doc["results"]
    for r in doc["results"]:
        assert r["driver"].endswith(", 1 producer process, consumer processes")
        assert r["messagesAcked"] == r["messagesSent"] > 0 and r["messagesRedelivered"] == 0
        assert r["messagesAcked"] * 0.95 <= r["messagesReceived"] <= r["messagesSent"]
        assert sum(r["consumeRate"]) > 0 and r["aggregatedEndToEndLatency99pct"] > 0
        cpu = r["cpuMicrosPerMessage"]
        assert set(cpu) == {"runner", "broker", "producers", "consumers"} and cpu["producers"] > 0, cpu
        assert r["mechanism"]["producers_cpu_us_per_msg"] == cpu["producers"]


def test_omb_client_processes_refuse_a_backlog_workload(tmp_path):
    from labs.omb import WorkloadError, run_omb
    from labs.schema import Workload
    w = Workload(name="b", consumerBacklogSizeGB=0.001)

    class NoClients:                  # refused before any client is made
        def create_topics(self, *a):
            raise AssertionError("no topic should be created")
    with pytest.raises(WorkloadError, match="consumerProcesses: a workload with consumerBacklogSizeGB"):
        run_omb(w, NoClients(), consumer_processes=True)


@pytest.mark.parametrize("body, words", [
    ("name: x\nbogus: 1\n", "bogus: unknown key"),
    ("topics: many\n", "topics: Input should be a valid integer"),
    ("topics: 1\npartitionsPerTopic: 0\n", "partitionsPerTopic: Input should be greater than or equal to 1"),
])
def test_bad_workload_files_name_the_file_and_key(tmp_path, body, words):
    p = tmp_path / "w.yaml"
    p.write_text(body)
    with pytest.raises(LabError) as e:
        load_lab(str(p))
    assert str(p) in str(e.value) and words in str(e.value)


def _lab_text(**over) -> str:
    import yaml
    base = yaml.safe_load(open(lab_files()[0], encoding="utf-8"))
    base.update(over)
    return yaml.safe_dump(base)


@pytest.mark.parametrize("over, words", [
    ({"systems": ["kafka-bridge", "kafka-nope"]}, "systems.1.system: Input should be"),
    ({"sweep": {"topicz": [1, 2]}}, "sweep key 'topicz' is not a workload key"),
    ({"verdict": {"metric": "publishRateAvg", "kind": "falloff", "expect_best": "tansu", "explain": "x"}},
     "verdict.expect_best 'tansu' is not one of the systems"),
    ({"verdict": {"metric": "publishRateAvg", "kind": "higher", "expect_best": "kafka-bridge", "against": ["tansu"],
                  "explain": "x"}}, "verdict.against: 'tansu' is not one of the other systems"),
    ({"question": None}, "question: Input should be a valid string"),
])
def test_bad_lab_files_name_the_key_and_expectation(tmp_path, over, words):
    p = tmp_path / "lab.yaml"
    p.write_text(_lab_text(**over))
    res = CliRunner().invoke(lab_cmd, ["run", str(p), "--quick", "--out", str(tmp_path / "o")])
    assert res.exit_code == 1 and str(p) in res.output and words in res.output, res.output
    assert not (tmp_path / "o").exists()                 # refused before anything started


def test_a_failing_system_is_reported_and_the_others_kept(tmp_path):
    import yaml
    base = yaml.safe_load(open(lab_files()[0], encoding="utf-8"))
    base["systems"] = ["kafka-bridge", {"system": "kafka-log", "label": "broken", "config": {"flushDiskType": "NOPE"}},
                       "docker-kafka"]
    base["verdict"]["expect_best"] = "kafka-bridge"
    p = tmp_path / "lab.yaml"
    p.write_text(yaml.safe_dump(base))
    out = tmp_path / "o"
    # one repeat: which system failed, ran or was skipped does not depend on how often each point runs
    res = CliRunner().invoke(lab_cmd, ["run", str(p), "--quick", "--repeats", "1", "--out", str(out)])
    assert res.exit_code == 1, res.output
    doc = json.loads((out / "results.json").read_text())
    by = {}
    for r in doc["results"]:
        by.setdefault(r["system"], set()).add(r["status"])
    assert by == {"kafka-bridge": {"ok"}, "broken": {"failed"}, "docker-kafka": {"skipped"}}
    broken = next(r for r in doc["results"] if r["system"] == "broken")
    assert "flushDiskType" in broken["log_tail"]
    report = (out / "report.md").read_text()
    assert "broken (failed)" in report and "docker-kafka (skipped)" in report
    assert doc["verdict"]["holds"] is None and "no verdict" in doc["verdict"]["text"]


def test_report_rebuilds_from_results(tmp_path, quick_run):
    import shutil
    done, res = quick_run(LABS[0])                 # the run test_every_lab_runs_quick... made (or a new one)
    assert res.exit_code == 0, res.output
    out = tmp_path / "o"
    shutil.copytree(done, out)
    for f in ("report.md", "report.html", "results.csv"):
        os.unlink(out / f)
    res = run_cli("report", str(out))
    assert res.exit_code == 0 and (out / "report.html").exists() and "verdict:" in res.output


def test_list_and_show(tmp_path):
    rows = json.loads(run_cli("list", "--json").output)
    assert {r["name"] for r in rows} == set(LABS) and all("error" not in r for r in rows)
    res = run_cli("show", "topic-count")
    assert "question:" in res.output and "seed 003" in res.output
    bad = CliRunner().invoke(lab_cmd, ["show", "no-such-lab"])
    assert bad.exit_code == 1 and "no such lab or file" in bad.output
