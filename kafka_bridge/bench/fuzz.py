"""The Kafka protocol of `rmq bench fuzz` (rmq/bench/fuzz.py, issue 16 part 4): seeds, field
mutations, the in-process target (the Kafka listener's own connection loop over a real broker) and
the socket-level probe. Plugged in through kafka_bridge.plugin's `fuzz_protocols`.
"""
from __future__ import annotations

import asyncio
import os
import random
import shutil
import struct
import tempfile

from kafka_bridge import protocol as kp
from rmq.common.framing import split_frames

SEEDS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fuzz_seeds", "kafka.bin")
_I32 = struct.Struct(">i")
#: Requests that may wait by design (a Fetch's max_wait_ms, a group's rebalance): not hangs.
WAITING_APIS = {kp.FETCH, kp.JOIN_GROUP, kp.SYNC_GROUP, kp.PRODUCE}


def _error_codes(obj, out: list) -> None:
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k == "error_code" and isinstance(v, int):
                out.append(v)
            elif isinstance(v, (dict, list)):
                _error_codes(v, out)
    elif isinstance(obj, list):
        for v in obj:
            _error_codes(v, out)


def _requests(data: bytes) -> list[tuple[int, int, int]]:
    """(correlation id, api key, version) of the request frames in an input, in order."""
    out = []
    for f in split_frames(data):
        try:
            h, _ = kp.parse_request_header(f[4:])
        except kp.ProtocolError:
            continue
        if h.api_key == kp.PRODUCE:  # acks=0: the broker sends no response
            try:
                if kp.decode_request(f[4:]).body["acks"] == 0:
                    continue
            except kp.ProtocolError:
                pass
        out.append((h.correlation_id, h.api_key, h.api_version))
    return out


def _headers(data: bytes) -> dict:
    return {c: (k, v) for c, k, v in _requests(data)}


def response_codes(request: bytes, response: bytes) -> list:
    """The error codes in the responses (top level and per topic/partition); raises when a
    response does not decode as the answer to its request (a bug of ours). Responses come in
    request order, so each is matched to the next request with its correlation id."""
    reqs = _requests(request)
    codes: list = []
    for f in split_frames(response):
        (corr,) = _I32.unpack_from(f, 4)
        while reqs and reqs[0][0] != corr:
            reqs.pop(0)
        if not reqs:
            raise kp.CorruptResponse(f"a response with correlation id {corr} that no request had")
        _, key, ver = reqs.pop(0)
        if key == kp.API_VERSIONS and not kp.SUPPORTED[key][0] <= ver <= kp.SUPPORTED[key][1]:
            ver = 0  # KIP-511: the answer to an unsupported ApiVersions version is a v0 body
        _, body = kp.decode_response(key, ver, f[4:])
        found: list = []
        _error_codes(body, found)
        codes.extend(sorted(set(found)) or [0])
    return codes


class KafkaTarget:
    """The Kafka listener's connection loop (KafkaServer._serve_connection: FrameDecoder,
    decode_request, the handlers, encode_response_parts) over a BrokerController on a temp store;
    one connection per input, its bytes then EOF."""

    def __init__(self, hang_s: float = 1.0, config: dict | None = None) -> None:
        from kafka_bridge import txn
        from kafka_bridge.bridge import KafkaBridge
        from kafka_bridge.server import KafkaServer
        from rmq.broker.controller import BrokerController
        from rmq.config import load_config
        self.hang_s = hang_s
        self.root = tempfile.mkdtemp(prefix="rmq-fuzz-kafka-")
        self.ctl = BrokerController(load_config(None, {"storePathRootDir": self.root,
                                                       "mappedFileSizeCommitLog": 64 * 1024 * 1024,
                                                       "kafkaGroupInitialRebalanceDelayMs": 0, **(config or {})}))
        self.ctl.start()
        self.ctl.create_topic("fuzz-seed", 2)
        self.loop = asyncio.new_event_loop()
        self.server = KafkaServer(None)

        async def setup():
            bridge = KafkaBridge(self.ctl, "127.0.0.1", 9092)
            bridge.loop = asyncio.get_running_loop()
            txn.attach(bridge)
            return bridge
        self.bridge = self.server.bridge = self.loop.run_until_complete(setup())

    def reset(self) -> None:
        self.server.activity.clear()

    def run(self, data: bytes) -> tuple:
        from kafka_bridge.bridge import Connection
        writer = _Writer()
        conn = Connection(peer=("127.0.0.1", 40000), authenticated=not self.bridge.config.kafkaSaslEnable)
        verdict = ""

        async def go():
            reader = asyncio.StreamReader(limit=1 << 20)
            reader.feed_data(data)
            reader.feed_eof()
            try:
                await self.server._serve_connection(reader, writer, conn)
            finally:
                self.server.activity.pop(asyncio.current_task(), None)

        waits = any(k in WAITING_APIS for k, _ in _headers(data).values())
        try:  # a request that waits by design (a Fetch's max_wait_ms) is given 50 ms, others hang_s
            self.loop.run_until_complete(asyncio.wait_for(go(), min(0.05, self.hang_s) if waits else self.hang_s))
        except asyncio.TimeoutError:
            verdict = "wait" if waits else "hang"
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # what _on_connect swallows
        resp = b"".join(writer.out)
        codes = response_codes(data, resp) if resp else []
        if not codes:
            codes = ["closed"]
        apis = ",".join(f"{kp.API_NAMES.get(k, k)}v{v}" for k, v in list(_headers(data).values())[:2])
        return (f"{apis}->{sorted(map(str, codes))}", codes, verdict)

    def close(self) -> None:
        try:
            self.bridge.close()
        except Exception:  # noqa: BLE001
            pass
        pending = asyncio.all_tasks(self.loop)  # the bridge's timers (a transaction reaper): let them end
        for t in pending:
            t.cancel()
        if pending:  # gather() of nothing makes a future on the current loop, not on self.loop
            self.loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        self.loop.close()
        self.ctl.shutdown()
        shutil.rmtree(self.root, ignore_errors=True)


class _Writer:
    """What the Kafka connection loop needs of a StreamWriter."""

    def __init__(self) -> None:
        self.out: list[bytes] = []
        self.transport = self

    def write(self, data) -> None:
        self.out.append(bytes(data))

    def writelines(self, parts) -> None:
        self.out.append(b"".join(bytes(p) for p in parts))

    def get_write_buffer_size(self) -> int:
        return 0

    def get_extra_info(self, name, default=None):
        return default  # no socket: responses go through write()

    def is_closing(self) -> bool:
        return False

    async def drain(self) -> None:
        return None

    def close(self) -> None:
        pass


class KafkaFuzzProtocol:
    name = "kafka"
    listener = "kafka"

    def seeds(self) -> list[bytes]:
        """Frames recorded from kafka-python and confluent-kafka, and every supported (api, version)
        encoded with its schema defaults."""
        try:
            with open(SEEDS, "rb") as fh:
                out = split_frames(fh.read())
        except OSError:
            out = []
        corr = 1
        for key, (lo, hi) in sorted(kp.SUPPORTED.items()):
            for v in sorted({lo, hi, (lo + hi) // 2}):
                try:
                    out.append(kp.encode_request(key, v, corr, {}, client_id="fuzz"))
                except kp.ProtocolError:
                    continue
                corr += 1
        return out

    def mutate_fields(self, p: bytearray, rng: random.Random) -> bytearray:
        if len(p) < 9:
            return p
        r = rng.random()
        if r < 0.3:  # api key: known, unknown, negative
            p[0:2] = struct.pack(">h", rng.choice((rng.randrange(-2, 80), rng.choice(list(kp.SUPPORTED)), 0x7FFF)))
        elif r < 0.6:  # api version around the supported range
            key = struct.unpack_from(">h", p)[0]
            lo, hi = kp.SUPPORTED.get(key, (0, 0))
            p[2:4] = struct.pack(">h", rng.choice((lo - 1, hi + 1, rng.randrange(lo, hi + 1), -1, 0x7FFF)))
        elif r < 0.75 and len(p) >= 10:  # client_id length
            p[8:10] = struct.pack(">h", rng.choice((-2, -1, 0, 0x7FFF, len(p))))
        else:  # a compact (varint) length or count somewhere: overlong or huge
            i = rng.randrange(8, len(p))
            p[i:i + 1] = rng.choice((b"\xff\xff\xff\xff\x0f", b"\x80\x80\x80\x80\x80\x01", b"\x00", b"\xfe\xff\xff\x07"))
        return p

    def make_target(self, hang_s: float, config: dict | None = None) -> KafkaTarget:
        return KafkaTarget(hang_s, config)

    def probe(self) -> bytes:
        return kp.encode_request(kp.API_VERSIONS, 0, 7, {}, client_id="probe")

    def probe_ok(self, resp: bytes) -> bool:
        corr, body = kp.decode_response(kp.API_VERSIONS, 0, resp[4:])
        return corr == 7 and body["error_code"] == 0

    def response_codes(self, request: bytes, response: bytes) -> list:
        return response_codes(request, response)

    def waits(self, request: bytes) -> bool:
        return any(k in WAITING_APIS for k, _ in _headers(request).values())


fuzz_protocols = {"kafka": KafkaFuzzProtocol()}
