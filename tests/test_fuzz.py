"""Fuzzing both listeners, slow and idle connections, 1,000 concurrent connections (issue 16 part 4;
DESIGN "Quality bar": a malformed frame gets an error code or a closed connection, the server stays
up and every other connection keeps working).

Bounded versions of `rmq bench fuzz`: in-process (codec + dispatch against a real broker object,
random mutator and atheris when installed) and over sockets against a real `rmq up`; then slowloris,
idle and connection-limit checks against `rmq up` processes with small limits. Every loop is
bounded in count and time; every socket read has a timeout.
"""
from __future__ import annotations

import resource
import socket
import struct
import time

import pytest

from kafka_bridge import protocol as kp
from kafka_bridge.bench.fuzz import KafkaFuzzProtocol
from rmq.bench.fuzz import (FUZZ_BROKER_CONFIG, EmbeddedUp, RemotingFuzzProtocol, atheris_available,
                            run_inprocess_atheris, run_inprocess_random, run_socket)
from rmq.config import ConfigError, load_config
from rmq.remoting import BodyDecodeError, CommandDecodeError, RemotingCommand, fastjson

pytestmark = [pytest.mark.timeout(120)]

PROTOS = {"kafka": KafkaFuzzProtocol(), "remoting": RemotingFuzzProtocol()}
IDLE_S = 2


def _raise_fd_limit(need: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < need:
        if hard != resource.RLIM_INFINITY and hard < need:
            pytest.skip(f"needs {need} file descriptors, the hard limit is {hard}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))


@pytest.fixture(scope="module")
def idle_up():
    """`rmq up` with the fuzz runs' config, whose listeners close connections idle for 2 s."""
    up = EmbeddedUp({**FUZZ_BROKER_CONFIG, "serverChannelMaxIdleTimeSeconds": IDLE_S,
                     "kafkaConnectionsMaxIdleMs": IDLE_S * 1000})
    up.start()
    yield up
    up.stop()


@pytest.fixture(scope="module")
def capped_up():
    """`rmq up` that takes at most 1,000 connections per listener (and does not close idle ones soon)."""
    _raise_fd_limit(4096)  # before the child starts: it inherits the limit
    up = EmbeddedUp({"serverMaxConnections": 1000, "kafkaMaxConnections": 1000})
    up.start()
    yield up
    up.stop()


def _recv_frame(s: socket.socket, timeout: float) -> bytes:
    deadline = time.monotonic() + timeout
    buf = b""
    while len(buf) < 4 or len(buf) < 4 + struct.unpack_from(">i", buf)[0]:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("no answer in time")
        s.settimeout(left)
        b = s.recv(65536)
        if not b:
            raise ConnectionError("closed by the server")
        buf += b
    return buf


def _ask(proto, s: socket.socket, timeout: float = 5.0) -> bool:
    s.sendall(proto.probe())
    return proto.probe_ok(_recv_frame(s, timeout))


def _closed_by_server(s: socket.socket, timeout: float) -> bool:
    """True when the server closes `s` within `timeout` (EOF or reset), False if it is still open."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        s.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            if not s.recv(65536):
                return True
        except socket.timeout:
            return False
        except OSError:
            return True
    return False


# --------------------------------------------------------------------------------- in-process
@pytest.mark.parametrize("name", ["kafka", "remoting"])
def test_inprocess_fuzz_random(name):
    st = run_inprocess_random(PROTOS[name], 4000, seed=16, hang_s=1.0, time_limit=10)
    assert st.frames >= 1000
    assert (st.crashes, st.hangs) == (0, 0), st.crash_samples
    assert "closed" in st.codes and len(st.codes) >= 4  # refused frames and real error codes both seen


@pytest.mark.skipif(not atheris_available(), reason="atheris is not installed")
def test_inprocess_fuzz_atheris_kafka():
    for name in ("kafka",):  # remoting under atheris: `rmq bench fuzz` (the random engine covers it here)
        st = run_inprocess_atheris(name, 2000, seed=16, hang_s=1.0)
        assert st.frames == 2000, st.crash_samples
        assert (st.crashes, st.hangs) == (0, 0), st.crash_samples
        assert "cov:" in st.extra["libfuzzer"]


def test_regression_lone_surrogate_in_json_header_is_a_decode_error():
    """Found by the fuzzer: a JSON header whose extFields held "\\ud800" decoded to a str that no
    UTF-8 encoder takes, and the broker's data_received raised UnicodeEncodeError answering it."""
    header = b'{"code":38,"extFields":{"consumerGroup":"\\ud800"},"flag":0,"language":"JAVA","opaque":1,"version":401}'
    with pytest.raises(CommandDecodeError, match="surrogate"):
        RemotingCommand.decode(struct.pack(">i", len(header)) + header)
    with pytest.raises(BodyDecodeError, match="surrogate"):
        fastjson.loads(b'{"group": "a\\udfffb"}')
    assert fastjson.loads(b'{"g": "\\ud83d\\ude00"}') == {"g": "\U0001F600"}  # a pair is text
    frame = struct.pack(">ii", len(header) + 4, len(header)) + header
    from rmq.bench.fuzz import FuzzStats, _Recorder
    target = PROTOS["remoting"].make_target(1.0)
    rec = _Recorder(FuzzStats("remoting", "inprocess", "test"), target, None, 1.0, use_alarm=False)
    try:
        rec.run(frame)
        assert rec.stats.crashes == 0 and rec.stats.codes == {"closed": 1}
    finally:
        rec.close()
        target.close()


# --------------------------------------------------------------------------------- memory bounds
def test_memory_verdict_on_the_last_half_of_the_rss_curve():
    from rmq.bench.fuzz import RSS_GROWTH_FLOOR_MB, RSS_GROWTH_MB_PER_100K, RssCurve, memory_verdict

    def curve(total, anon):  # RssAnon as a function of the inputs done, sampled every 10%
        return [{"inputs": n, "rss_mb": 50.0, "anon_mb": anon(n)} for n in range(0, total + 1, total // 10)]

    flat = memory_verdict(curve(1_000_000, lambda n: 40 + 5 * min(n, 300_000) / 300_000))  # fills, then levels off
    assert flat["bounded"] is True and flat["growth_mb"] == 0
    assert (flat["from_input"], flat["to_input"]) == (500_000, 1_000_000)
    leak = memory_verdict(curve(1_000_000, lambda n: 40 + n / 100_000))  # 1 MB per 100,000 inputs, for ever
    assert leak["bounded"] is False and leak["growth_mb_per_100k"] == 1.0
    assert leak["allowed_mb"] == RSS_GROWTH_MB_PER_100K * 5
    short = memory_verdict(curve(1000, lambda n: 40 + n / 1000))  # 1 MB: under the floor of a short run
    assert short["bounded"] is True and short["allowed_mb"] == RSS_GROWTH_FLOOR_MB
    assert memory_verdict(curve(1000, lambda n: 40)[:1])["bounded"] is None
    rss = RssCurve(25)  # this process, at the start and after every 10% of 25 inputs (rounded up)
    for done in range(1, 26):
        rss.tick(done)
    rss.finish(25)
    assert [p["inputs"] for p in rss.points] == [0, 3, 5, 8, 10, 13, 15, 18, 20, 23, 25]
    assert all(p["anon_mb"] > 0 and p["rss_mb"] >= p["anon_mb"] for p in rss.points)


def test_random_engine_corpus_and_outcomes_stay_bounded(monkeypatch):
    import random

    from rmq.bench import fuzz
    monkeypatch.setattr(fuzz, "CORPUS_MAX", 50)
    monkeypatch.setattr(fuzz, "CORPUS_MAX_BYTES", 4000)
    seeds = [b"s" * 10, b"t" * 10]
    corpus = fuzz.Corpus(seeds, random.Random(1))
    for i in range(48):  # up to CORPUS_MAX inputs
        corpus.add(bytes([i]) * (20 + i))
    assert len(corpus) == 50
    full = corpus.nbytes
    for i in range(300):  # then new inputs take turns, none longer than the one it replaces
        corpus.add(bytes([i % 256]) * (1 + i % 90))
        assert len(corpus) == 50 and full >= corpus.nbytes == sum(map(len, corpus))
    assert corpus[:2] == seeds and corpus.nbytes < full  # the seeds stay
    by_bytes = fuzz.Corpus(seeds, random.Random(1))
    for _ in range(100):  # up to CORPUS_MAX_BYTES
        by_bytes.add(b"x" * 150)
    assert len(by_bytes) == 2 + (4000 - 20) // 150 and by_bytes.nbytes <= 4000
    monkeypatch.setattr(fuzz, "SEEN_MAX", 10)
    target = type("T", (), {"run": lambda self, data: (data, [0], ""), "reset": lambda self: None})()
    rec = fuzz._Recorder(fuzz.FuzzStats("t", "inprocess", "test"), target, None, 1.0, use_alarm=False)
    try:
        assert all(rec.run(bytes([i])) for i in range(30))  # 30 new outcomes...
        assert len(rec.seen) == 10 and bytes([29]) in rec.seen  # ...of which the last 10 are remembered
    finally:
        rec.close()


def test_api_usage_table_stays_at_its_cap(caplog):
    """A client may send a new client id on every connection (the fuzzer does): the table of
    (client, api, version) counts that docs/kafka-compat.md is made from stays at its cap."""
    from kafka_bridge.server import API_USAGE_LABEL_MAX, API_USAGE_MAX_KEYS, OTHER_CLIENTS, count_api_usage
    usage: dict = {}
    count_api_usage(usage, "confluent-kafka-python", kp.PRODUCE, 9)
    count_api_usage(usage, "x" * 1000, kp.METADATA, 12)
    with caplog.at_level("WARNING", logger="kafka_bridge.server"):
        for i in range(API_USAGE_MAX_KEYS + 3000):
            count_api_usage(usage, f"client-{i}", kp.PRODUCE if i % 2 else kp.FETCH, 9)
    count_api_usage(usage, "confluent-kafka-python", kp.PRODUCE, 9)  # a client seen before keeps its row
    assert len(usage) == API_USAGE_MAX_KEYS + 2  # and the further clients, per api and version
    assert usage[("confluent-kafka-python", kp.PRODUCE, 9)] == 2
    assert usage[(OTHER_CLIENTS, kp.PRODUCE, 9)] + usage[(OTHER_CLIENTS, kp.FETCH, 9)] == 3002
    assert usage[("x" * API_USAGE_LABEL_MAX, kp.METADATA, 12)] == 1  # a long label is cut
    assert len([r for r in caplog.records if "usage table full" in r.getMessage()]) == 1


def test_idle_producer_ids_and_transactional_ids_expire():
    """producer.id.expiration.ms and transactional.id.expiration.ms, as in Kafka: each start of an
    idempotent producer takes a new producer id; transactional ids are what clients send."""
    import types

    from kafka_bridge.idempotence import ProducerStateManager
    from kafka_bridge.txn import EMPTY, KafkaTransactionManager, _Txn
    m = ProducerStateManager(expiration_ms=1000, check_interval_ms=0)
    _, idle, _ = m.init_producer(None, 60_000)
    _, busy, _ = m.init_producer(None, 60_000)
    for pid in (idle, busy):
        m.record(pid, 0, "t", 0, 0, 5, 100)
    _, tx, _ = m.init_producer("tx", 60_000)
    for info in m.producers.values():  # an hour ago...
        info.last_seen -= 3600
    m.partitions[(idle, "t", 0)].last_seen -= 3600
    m.record(busy, 0, "t", 0, 5, 5, 105)  # ...but this one has produced since
    _, new, _ = m.init_producer(None, 60_000)
    assert set(m.producers) == {busy, tx, new} and set(m.partitions) == {(busy, "t", 0)}
    assert m.check(busy, 0, "t", 0, 5, 5) == (0, 105)  # its retried batch is still known

    bridge = types.SimpleNamespace(controller=types.SimpleNamespace(transaction_service=None), producers=m)
    txns = KafkaTransactionManager(bridge)
    txns.txns["tx"] = t = _Txn("tx", tx, 0, 60_000)  # as InitProducerId("tx") leaves it
    txns._reap_once(t.touched + txns.expiration_s - 1)
    assert "tx" in txns.txns and t.state == EMPTY
    txns._reap_once(t.touched + txns.expiration_s + 1)
    assert "tx" not in txns.txns and "tx" not in m.by_txn_id and tx not in m.producers


def test_caches_keyed_by_client_strings_keep_small_keys_only():
    """validate_topic and the subscription filters cache names and expressions of a legal length
    only (a cache keeps its keys whole); pack_host's cache, one entry per connection, has a bound."""
    from rmq.common import message
    from rmq.server.processors import pull
    from rmq.store import message_store
    assert {message.pack_host(("127.0.0.1", port)) for port in range(5000, 15000)} == {
        (bytes([127, 0, 0, 1]), port, False) for port in range(5000, 15000)}
    assert message.pack_host.cache_info().currsize <= message.pack_host.cache_info().maxsize == 4096
    before = message_store._validate_topic.cache_info().currsize
    assert "longer than" in message_store.validate_topic("t" * 100_000)
    assert message_store.validate_topic("") == "topic is empty"
    assert message_store._validate_topic.cache_info().currsize == before + 1  # "" only
    before = pull._message_filter_cached.cache_info().currsize
    long_expr = " || ".join(f"tag{i}" for i in range(2000))
    assert pull.message_filter_for("TAG", long_expr).filter.tags == {f"tag{i}" for i in range(2000)}
    assert pull._message_filter_cached.cache_info().currsize == before


def test_limit_config_keys_validated(tmp_path):
    cfg = load_config(None)
    assert (cfg.broker.serverChannelMaxIdleTimeSeconds, cfg.broker.kafkaConnectionsMaxIdleMs) == (120, 600_000)
    assert (cfg.broker.remotingFrameMaxLength, cfg.broker.kafkaSocketRequestMaxBytes) == (17 << 20, 100 << 20)
    assert (cfg.broker.serverMaxConnections, cfg.broker.kafkaMaxConnections) == (10000, 10000)
    with pytest.raises(ConfigError, match="kafkaMaxConnections"):
        load_config(None, {"kafkaMaxConnections": -1})
    with pytest.raises(ConfigError, match="remotingFrameMaxLength"):
        load_config(None, {"remotingFrameMaxLength": 10})


# --------------------------------------------------------------------------------- sockets
@pytest.mark.parametrize("name", ["kafka", "remoting"])
def test_socket_fuzz_against_rmq_up(idle_up, name):
    st = run_socket(PROTOS[name], 1500, up=idle_up, seed=16, hang_s=15.0, workers=8, probe_every=250)  # 15 s: a loaded machine, still finite
    d = st.as_dict()
    assert st.frames == 1500
    assert (st.crashes, st.hangs) == (0, 0), st.crash_samples
    assert d["server_alive"] and d["probes_failed"] == 0 and d["probes_ok"] >= 6
    assert d["server_rss_growth_mb"] < 64
    assert [p["inputs"] for p in d["rss_curve"]] == list(range(0, 1501, 150))  # the broker's, every 10%
    assert d["memory"]["bounded"] in (True, False) and d["memory"]["to_input"] == 1500


@pytest.mark.parametrize("name", ["kafka", "remoting"])
def test_slowloris_and_idle_connections_are_closed_others_keep_working(idle_up, name):
    proto = PROTOS[name]
    addr = idle_up.addr(proto.listener)
    healthy = socket.create_connection(addr, timeout=5)
    silent = socket.create_connection(addr, timeout=5)
    slow = socket.create_connection(addr, timeout=5)
    used = socket.create_connection(addr, timeout=5)
    try:
        assert _ask(proto, used)  # answered once, then silent: idle too
        frame = proto.probe()
        slow.sendall(struct.pack(">i", 100) + frame[4:6])  # a header promising 100 bytes, then a trickle
        t0 = time.monotonic()
        slow_closed = None
        sent = 0
        while time.monotonic() - t0 < IDLE_S * 4:  # bounded: 8 s
            assert _ask(proto, healthy)  # a busy connection is never idle, and is served meanwhile
            try:
                slow.send(b"\x00")
                sent += 1
            except OSError:
                slow_closed = time.monotonic() - t0
                break
            if _closed_by_server(slow, 0.4):
                slow_closed = time.monotonic() - t0
                break
        assert slow_closed is not None, "the slowloris connection was still open after 4x the idle timeout"
        assert slow_closed >= IDLE_S * 0.9 and sent >= 3
        assert _closed_by_server(silent, IDLE_S * 2)
        assert _closed_by_server(used, IDLE_S * 2)
        assert _ask(proto, healthy)
        with socket.create_connection(addr, timeout=5) as fresh:
            assert _ask(proto, fresh)
    finally:
        for s in (healthy, silent, slow, used):
            s.close()
    assert "IDLE" in idle_up.log_text() or "idle" in idle_up.log_text()


@pytest.mark.parametrize("name", ["kafka", "remoting"])
def test_1000_concurrent_connections_within_the_configured_cap(capped_up, name):
    proto = PROTOS[name]
    addr = capped_up.addr(proto.listener)
    socks: list[socket.socket] = []
    try:
        for _ in range(1000):
            socks.append(socket.create_connection(addr, timeout=10))
        req = proto.probe()
        for s in socks:
            s.sendall(req)
        answered = sum(proto.probe_ok(_recv_frame(s, 10)) for s in socks)
        assert answered == 1000
        # over the cap (serverMaxConnections / kafkaMaxConnections = 1000): closed at once, unanswered
        extra = socket.create_connection(addr, timeout=10)
        socks.append(extra)
        try:
            extra.sendall(req)
        except OSError:
            pass
        assert _closed_by_server(extra, 5)
        assert all(_ask(proto, s) for s in socks[:1000:100])  # the others keep working
        for s in socks[:10]:
            s.close()
        deadline = time.monotonic() + 10  # the server sees those closes, then takes a new one
        while True:
            with socket.create_connection(addr, timeout=10) as fresh:
                try:
                    if _ask(proto, fresh):
                        break
                except (ConnectionError, OSError, TimeoutError):
                    pass
            assert time.monotonic() < deadline, "no room for a new connection after closing 10"
            time.sleep(0.1)
    finally:
        for s in socks:
            s.close()
    assert "connections open" in capped_up.log_text()


def test_regression_fetch_min_bytes_wait_does_not_block_other_connections(idle_up):
    """Found by the fuzzer (a libFuzzer timeout): a Fetch whose min_bytes exceeds the bytes a
    partition holds past fetch_offset spun the event loop until max_wait_ms (the arrival wait
    returned at once because the queue already held data past that offset), so every other
    connection of the broker stalled for that long."""
    import threading

    from kafka_bridge.records import encode_batch

    from .kafka_fixtures import RawClient, create_topic_raw
    host, port = idle_up.addr("kafka")
    bootstrap = f"{host}:{port}"
    assert create_topic_raw(bootstrap, "fetch-spin", 1) == 0
    with RawClient(bootstrap) as c:
        r = c.request(kp.PRODUCE, 8, {"transactional_id": None, "acks": -1, "timeout_ms": 5000, "topic_data": [
            {"name": "fetch-spin", "partition_data": [{"index": 0, "records": encode_batch(
                [(None, b"small", [], int(time.time() * 1000))])}]}]})
        assert r["responses"][0]["partition_responses"][0]["error_code"] == 0
    result = {}

    def long_fetch():
        with RawClient(bootstrap) as f:
            t0 = time.monotonic()
            r = f.request(kp.FETCH, 11, {"replica_id": -1, "max_wait_ms": 2500, "min_bytes": 1 << 20,
                                         "max_bytes": 1 << 20, "isolation_level": 0, "session_id": 0,
                                         "session_epoch": -1, "topics": [
                {"topic": "fetch-spin", "partitions": [{"partition": 0, "current_leader_epoch": -1,
                                                        "fetch_offset": 0, "log_start_offset": -1,
                                                        "partition_max_bytes": 1 << 20}]}],
                "forgotten_topics_data": [], "rack_id": ""})
            result["s"] = time.monotonic() - t0
            result["records"] = r["responses"][0]["partitions"][0]["records"]

    th = threading.Thread(target=long_fetch, daemon=True)
    th.start()
    time.sleep(0.3)  # the fetch is waiting now
    proto = PROTOS["kafka"]
    with socket.create_connection(idle_up.addr("kafka"), timeout=5) as other:
        for _ in range(5):  # bounded: 5 probes, all answered while the fetch still waits
            assert _ask(proto, other, timeout=5)
            time.sleep(0.1)
        assert th.is_alive(), "another connection was answered only after the long Fetch returned"
    th.join(10)
    assert result["s"] >= 2.0 and result["records"]  # the fetch itself waited max_wait_ms, then answered


@pytest.mark.parametrize("version", [10, 11, 12])
def test_regression_metadata_unknown_topic_id_before_v12_is_answered(idle_up, version):
    """Found by the fuzzer: a Metadata v10/v11 request naming a topic by an unknown topic_id (and
    a null name) was answered with a null topic name, which those versions cannot encode: the
    listener logged a traceback and closed the connection instead of answering UNKNOWN_TOPIC_ID."""
    import uuid

    from .kafka_fixtures import RawClient
    host, port = idle_up.addr("kafka")
    before = idle_up.log_text().count("Traceback")
    with RawClient(f"{host}:{port}") as c:
        r = c.request(kp.METADATA, version, {"topics": [{"topic_id": uuid.uuid4(), "name": None}],
                                              "allow_auto_topic_creation": False})
        (t,) = r["topics"]
        assert t["error_code"] == kp.error_codes.UNKNOWN_TOPIC_ID
        assert t["name"] == ("" if version < 12 else None)
        assert c.request(kp.API_VERSIONS, 0, {})["error_code"] == 0  # the connection is still served
    assert idle_up.log_text().count("Traceback") == before
