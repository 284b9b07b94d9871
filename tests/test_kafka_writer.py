"""The Kafka listener's response writer thread (rmq/_native_writer.h, kafka_bridge/server.py _Replies).

The channel functions on a socketpair (order, a reader slower than the writes, close after the
queue, a failed send reported), then the listener of a real `rmq up`: pipelined requests answered
in order, Fetch responses far over the 1 MiB high-water mark to a client that reads late, and
connections the client drops with responses queued leave no descriptor behind.
"""
from __future__ import annotations

import os
import socket
import struct

import pytest

from kafka_bridge import protocol as kp
from kafka_bridge.records import encode_batch
from rmq import native

from .kafka_fixtures import RawClient, create_topic_raw, kafka_broker, unique, wait_until  # noqa: F401

pytestmark = [pytest.mark.timeout(90),
              pytest.mark.skipif(native.ext is None or not hasattr(native.ext, "kafka_writer_open"),
                                 reason="needs the C extension's writer thread")]


def _read_exact(sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(min(1 << 20, n - len(out)))
        if not chunk:
            break
        out += chunk
    return bytes(out)


def test_writes_arrive_in_order_at_a_reader_slower_than_the_writer():
    a, b = socket.socketpair()
    try:
        b.settimeout(20)
        ch = native.ext.kafka_writer_open(a.fileno())
        sent = []
        for i in range(3000):  # about 9 MiB: far more than the socket buffers hold
            data = struct.pack(">I", i) * (1 + i % 1500)
            sent.append(data)
            # every other write as a list of buffers (one response frame in parts) and without a wake
            if i % 2:
                native.ext.kafka_writer_write(ch, [data[:3], data[3:]], False)
            else:
                native.ext.kafka_writer_write(ch, data)
        native.ext.kafka_writer_kick()
        whole = b"".join(sent)
        assert native.ext.kafka_writer_pending(ch) > 0  # the reader has read nothing yet
        assert _read_exact(b, len(whole)) == whole
        wait_until(lambda: native.ext.kafka_writer_pending(ch) == 0, 10, what="the queue to empty")
        native.ext.kafka_writer_close(ch)
    finally:
        a.close()
        b.close()


def test_close_sends_the_queue_then_ends_the_connection():
    a, b = socket.socketpair()
    try:
        b.settimeout(20)
        ch = native.ext.kafka_writer_open(a.fileno())
        payload = os.urandom(4 << 20)
        native.ext.kafka_writer_write(ch, payload)
        native.ext.kafka_writer_close(ch)
        a.close()  # the transport closes its own descriptor at once; the writer's copy goes on
        assert _read_exact(b, len(payload) + 1) == payload  # everything, then the end (b"")
        with pytest.raises(ValueError):
            native.ext.kafka_writer_write(ch, b"late")
        native.ext.kafka_writer_close(ch)  # twice is fine
    finally:
        a.close()
        b.close()


def test_a_failed_send_is_reported_by_the_next_call():
    a, b = socket.socketpair()
    try:
        ch = native.ext.kafka_writer_open(a.fileno())
        b.close()

        def failed():
            try:
                native.ext.kafka_writer_write(ch, b"x" * 1000)
            except OSError as exc:
                return exc
            return None

        exc = wait_until(failed, 10, what="the broken pipe to be reported")
        assert isinstance(exc, BrokenPipeError) or isinstance(exc, ConnectionResetError)
        with pytest.raises(OSError):
            native.ext.kafka_writer_pending(ch)
        native.ext.kafka_writer_close(ch)
    finally:
        a.close()


def test_bad_arguments_are_errors():
    with pytest.raises(ValueError):
        native.ext.kafka_writer_open(-1)
    with pytest.raises(OSError):
        native.ext.kafka_writer_open(_closed_fd())
    with pytest.raises((TypeError, ValueError)):
        native.ext.kafka_writer_write(object(), b"x")
    a, b = socket.socketpair()
    try:
        ch = native.ext.kafka_writer_open(a.fileno())
        with pytest.raises(TypeError):
            native.ext.kafka_writer_write(ch, ["not bytes"])
        assert native.ext.kafka_writer_pending(ch) == 0  # nothing queued by the refused write
        native.ext.kafka_writer_close(ch)
    finally:
        a.close()
        b.close()


def _closed_fd() -> int:
    s = socket.socket()
    fd = s.fileno()
    s.close()
    return fd


# ------------------------------------------------------------------------------ the listener
def _fetch_request(corr: int, topic: str, offset: int) -> bytes:
    return kp.encode_request(kp.FETCH, 11, corr, {
        "replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 8 << 20, "isolation_level": 0,
        "session_id": 0, "session_epoch": -1, "topics": [
            {"topic": topic, "partitions": [{"partition": 0, "current_leader_epoch": -1, "fetch_offset": offset,
                                             "log_start_offset": -1, "partition_max_bytes": 8 << 20}]}],
        "forgotten_topics_data": [], "rack_id": ""}, client_id="writer-test")


@pytest.fixture(scope="module")
def big_topic(kafka_broker):
    """A topic whose partition 0 holds about 2 MiB of records."""
    name = unique("writer")
    assert create_topic_raw(kafka_broker.bootstrap, name, 1) == 0
    with RawClient(kafka_broker.bootstrap) as c:
        for _ in range(4):
            batch = encode_batch([(None, os.urandom(100_000), [], 0) for _ in range(5)])
            r = c.request(kp.PRODUCE, 8, {"transactional_id": None, "acks": 1, "timeout_ms": 5000, "topic_data": [
                {"name": name, "partition_data": [{"index": 0, "records": batch}]}]})
            assert r["responses"][0]["partition_responses"][0]["error_code"] == 0
    return name


def test_pipelined_fetches_far_over_the_high_water_mark_come_back_whole_and_in_order(kafka_broker, big_topic):
    n = 24  # each answer holds about 2 MiB: ~48 MiB queued for a client that reads only at the end
    with RawClient(kafka_broker.bootstrap, timeout=60) as c:
        c.send_raw(b"".join(_fetch_request(corr, big_topic, 0) for corr in range(1, n + 1)))
        for corr in range(1, n + 1):
            got_corr, resp = kp.decode_response(kp.FETCH, 11, c.read_frame())
            assert got_corr == corr
            (part,) = resp["responses"][0]["partitions"]
            assert part["error_code"] == 0 and part["high_watermark"] == 20
            assert len(part["records"]) > 2_000_000
        # the connection still serves requests afterwards
        r = c.request(kp.API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})
        assert r["error_code"] == 0


def _open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts descriptors in /proc")
def test_connections_dropped_with_responses_queued_leave_no_descriptor(kafka_broker, big_topic):
    pid = kafka_broker.proc.pid
    with RawClient(kafka_broker.bootstrap) as c:  # warm: the listener's own descriptors are open
        c.request(kp.API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})
    before = _open_fds(pid)
    for _ in range(5):
        with RawClient(kafka_broker.bootstrap, timeout=60) as c:
            c.send_raw(b"".join(_fetch_request(corr, big_topic, 0) for corr in range(1, 9)))
            c.read_frame()  # one answer read, the others queued, then the client goes away
    wait_until(lambda: _open_fds(pid) <= before, 30, what="the dropped connections' descriptors to close")
    with RawClient(kafka_broker.bootstrap) as c:
        r = c.request(kp.API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})
        assert r["error_code"] == 0
