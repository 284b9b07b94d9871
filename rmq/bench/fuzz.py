"""`rmq bench fuzz`: fuzzing the broker's listeners with mutated real-client frames (issue 16 part 4,
DESIGN "Quality bar": bad input never takes the server down).

Two levels:
  inprocess  the codec and the request dispatch against a real broker service object (a
             BrokerController on a temp store): for remoting, FrameDecoder -> RemotingCommand.decode
             -> Dispatcher -> the broker's processors; for Kafka (the kafka_bridge plugin), the Kafka
             listener's connection loop (FrameDecoder, decode_request, handlers, encode). Engines:
             atheris (coverage-guided libFuzzer, in a forked child; the default when installed) or
             random (the same structure-aware mutator, outcome-guided, no coverage).
  socket     a real `rmq up` on free ports: every input goes on a new connection, every read has a
             deadline; a long-lived healthy connection is probed as the fuzzing goes, the server's
             RSS is sampled, its log is checked for tracebacks and the process must stay up.

A crash is an exception the listener did not turn into a protocol error (one that escapes, or that
the listener's last-resort handler logs at ERROR with a traceback); a hang is an input whose
handling outlasts --hang-timeout (except requests that wait by design, e.g. a Fetch's max_wait_ms,
counted as "waits"). Crashing and hanging inputs are saved under --crash-dir.

Memory: the target's RSS (the broker process over sockets, this process in-process) at every 10%
of the inputs, and a verdict on its growth over the last half of the run (MEMORY_RULE below). The
fuzz runs turn auto-creation of topics and groups off (FUZZ_BROKER_CONFIG), and the random engine's
corpus and remembered outcomes are capped, so the curve is about the broker.

Seeds: frames recorded from real clients (rmq/bench/fuzz_seeds/, kafka_bridge/bench/fuzz_seeds/,
made by `python -m kafka_bridge.bench.fuzz_capture`) plus frames encoded with the codecs.
"""
from __future__ import annotations

import json
import logging
import os
import random
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field

import click

from rmq.common.framing import split_frames

log = logging.getLogger("rmq.bench.fuzz")

SEEDS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fuzz_seeds")
_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
INTERESTING_32 = (0, 1, -1, 0x7FFFFFFF, -0x80000000, 0x7FFFFFFE, 0xFFFF, 0x10000, 0x1000000,
                  100 * 1024 * 1024 + 1, 17 * 1024 * 1024 + 1, 4096)
INTERESTING_16 = (0, 1, -1, 0x7FFF, -0x8000, 0xFF, 0x100, 2)
INTERESTING_8 = (0, 1, 0x7F, 0x80, 0xFF, 0x22, 0x5C, 0x7B)


class FuzzHang(Exception):
    """An input took longer than the hang timeout (raised by the SIGALRM watchdog)."""


# -------------------------------------------------------------------------------------- frames
def load_seed_file(path: str) -> list[bytes]:
    try:
        with open(path, "rb") as fh:
            return split_frames(fh.read())
    except OSError:
        return []


class Mutator:
    """Structure-aware mutation of one framed input: byte-level edits of the payload (bit flips,
    interesting 8/16/32-bit values, which hit counts, lengths and sizes; deletes, inserts,
    duplicates, truncation, splices with other seeds), the protocol's field edits
    (`field_mutator(payload, rng)`: api key / version, request code, header JSON...), then a
    framing choice: a correct length prefix most of the time, else a huge or negative one, a frame
    cut short, two frames back to back, or the old prefix left as it was."""

    def __init__(self, rng: random.Random, corpus: list[bytes], field_mutator=None, max_len: int = 1 << 16):
        self.rng = rng
        self.corpus = corpus
        self.field_mutator = field_mutator
        self.max_len = max_len

    def mutate(self, data: bytes) -> bytes:
        rng = self.rng
        old_prefix = data[:4]
        p = bytearray(data[4:] if len(data) >= 4 else data)
        for _ in range(1 + rng.randrange(3)):
            op = rng.randrange(10)
            n = len(p)
            if op == 0 and n:
                i = rng.randrange(n)
                p[i] ^= 1 << rng.randrange(8)
            elif op == 1 and n:
                p[rng.randrange(n)] = rng.choice(INTERESTING_8)
            elif op == 2 and n >= 2:
                i = rng.randrange(n - 1)
                v = rng.choice(INTERESTING_16)
                p[i:i + 2] = struct.pack(">H" if v >= 0 else ">h", v)
            elif op == 3 and n >= 4:
                i = rng.randrange(n - 3)
                v = rng.choice(INTERESTING_32)
                p[i:i + 4] = struct.pack(">I" if v >= 0 else ">i", v)
            elif op == 4 and n:
                i = rng.randrange(n)
                del p[i:i + 1 + rng.randrange(min(16, n - i))]
            elif op == 5:
                i = rng.randrange(n + 1)
                p[i:i] = bytes(rng.randrange(256) for _ in range(1 + rng.randrange(8)))
            elif op == 6 and n:
                i = rng.randrange(n)
                j = min(n, i + 1 + rng.randrange(64))
                p[i:i] = p[i:j] * (1 + rng.randrange(4))
            elif op == 7 and n:
                del p[rng.randrange(n):]
            elif op == 8 and self.corpus:
                other = rng.choice(self.corpus)[4:]
                if other:
                    i = rng.randrange(n + 1)
                    p[i:] = other[rng.randrange(len(other)):]
            elif self.field_mutator is not None:
                p = self.field_mutator(p, rng)
        del p[self.max_len:]
        r = rng.random()
        if r < 0.80:
            return _I32.pack(len(p)) + bytes(p)
        if r < 0.86:
            return _I32.pack(rng.choice((-1, -0x80000000, 0x7FFFFFFF, 100 * 1024 * 1024 + 1,
                                         17 * 1024 * 1024 + 1, len(p) + 1 + rng.randrange(1 << 20)))) + bytes(p)
        if r < 0.91:  # the length promises more than comes
            return _I32.pack(len(p) + 1 + rng.randrange(64)) + bytes(p)
        if r < 0.96 and self.corpus:
            return _I32.pack(len(p)) + bytes(p) + rng.choice(self.corpus)
        return bytes(old_prefix) + bytes(p)


#: The broker config of every fuzz run (both levels): no topic or subscription group is made up
#: from a fuzzed name on first use (autoCreateTopicEnable, autoCreateSubscriptionGroup, Kafka's
#: auto.create.topics.enable). Each would be legitimate state, kept and persisted, growing with every
#: new name the mutator makes up, and hiding a real leak in the memory curve. Explicit creates (the
#: seeds' CreateTopics, UPDATE_AND_CREATE_TOPIC and UPDATE_AND_CREATE_SUBSCRIPTIONGROUP) still work.
FUZZ_BROKER_CONFIG = {"autoCreateTopicEnable": False, "autoCreateSubscriptionGroup": False,
                      "kafkaAutoCreateTopics": False}

#: Bounds on the random engine's own memory, so that in-process the RSS curve levels off once they
#: are full: the corpus (CORPUS_MAX inputs, CORPUS_MAX_BYTES in all) and the outcomes remembered as
#: seen (the oldest forgotten first).
CORPUS_MAX = 20_000
CORPUS_MAX_BYTES = 8 << 20
SEEN_MAX = 20_000


class Corpus(list):
    """The seeds, then the inputs that gave a new outcome, up to CORPUS_MAX inputs and
    CORPUS_MAX_BYTES; when full, a new input takes the place of a random non-seed one that is not
    shorter, so that a full corpus stops growing."""

    def __init__(self, seeds: list[bytes], rng: random.Random) -> None:
        super().__init__(seeds)
        self.fixed = len(seeds)
        self.nbytes = sum(map(len, seeds))
        self.rng = rng

    def add(self, data: bytes) -> None:
        if len(self) < CORPUS_MAX and self.nbytes + len(data) <= CORPUS_MAX_BYTES:
            self.append(data)
            self.nbytes += len(data)
        elif len(self) > self.fixed:
            i = self.rng.randrange(self.fixed, len(self))
            if len(data) <= len(self[i]):
                self.nbytes += len(data) - len(self[i])
                self[i] = data


# -------------------------------------------------------------------------------------- stats
class _ErrorLog(logging.Handler):
    """Counts ERROR records with a traceback in the listeners' loggers: what a last-resort handler
    logs ("handler X failed", "processing X failed") is a crash the client never sees."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.count = 0
        self.last: str = ""

    def emit(self, record: logging.LogRecord) -> None:
        if not record.exc_info:  # e.g. PullMessageProcessor's "the topic X not exist": RocketMQ logs it at ERROR too
            return
        self.count += 1
        try:
            self.last = record.getMessage()
            if record.exc_info and record.exc_info[1] is not None:
                self.last += f": {type(record.exc_info[1]).__name__}: {record.exc_info[1]}"
        except Exception:  # noqa: BLE001
            self.last = str(record.msg)


#: The memory rule of `rmq bench fuzz`. The target's memory (the broker process over sockets, this
#: process in-process) is read from /proc/<pid>/status at the start and at every 1/RSS_SAMPLES of
#: the inputs: VmRSS, and RssAnon, its anonymous part (heap, stacks). The verdict is on RssAnon: the
#: rest of VmRSS is file pages, mostly the store's mapped commitlog and consume queues, which grow
#: with the messages the fuzzer stores and belong to the page cache. Memory is bounded when, over
#: the last half of the inputs, RssAnon grew by less than RSS_GROWTH_MB_PER_100K MB per 100,000
#: inputs, with RSS_GROWTH_FLOOR_MB allowed whatever the length (allocator noise on short runs).
RSS_SAMPLES = 10
RSS_GROWTH_MB_PER_100K = 0.5
RSS_GROWTH_FLOOR_MB = 2.0
MEMORY_RULE = (f"RssAnon grows by less than {RSS_GROWTH_MB_PER_100K:g} MB per 100,000 inputs over the last half "
               f"of the inputs (at least {RSS_GROWTH_FLOOR_MB:g} MB allowed)")


def memory_verdict(curve: list) -> dict:
    """Applies MEMORY_RULE to a curve of RssCurve points (in input order): the RssAnon growth from
    the point nearest half-way to the last point, against the allowance for that many inputs."""
    if len(curve) < 2 or curve[-1]["inputs"] <= 0 or not curve[-1]["anon_mb"]:
        return {"rule": MEMORY_RULE, "bounded": None, "why": "too few samples"}
    end = curve[-1]
    mid = min(curve[:-1], key=lambda p: abs(p["inputs"] - end["inputs"] / 2))
    inputs = end["inputs"] - mid["inputs"]
    growth = end["anon_mb"] - mid["anon_mb"]
    allowed = max(RSS_GROWTH_FLOOR_MB, RSS_GROWTH_MB_PER_100K * inputs / 100_000)
    return {"rule": MEMORY_RULE, "bounded": growth < allowed, "from_input": mid["inputs"], "to_input": end["inputs"],
            "growth_mb": round(growth, 2), "allowed_mb": round(allowed, 2),
            "growth_mb_per_100k": round(growth * 100_000 / inputs, 2) if inputs else 0.0}


def proc_memory_mb(pid: int | str = "self") -> dict:
    """VmRSS, RssAnon and VmHWM (the peak RSS) of a process in MB, from /proc/<pid>/status
    (empty when there is none: not Linux, or the process is gone)."""
    out = {}
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                if key in ("VmRSS", "RssAnon", "VmHWM"):
                    out[key] = int(value.split()[0]) * 1024 / 1e6  # kB
    except OSError:
        pass
    return out


class RssCurve:
    """The memory of process `pid` at the start and at every 1/RSS_SAMPLES of `total` inputs:
    `points` holds {"inputs", "rss_mb" (VmRSS), "anon_mb" (RssAnon)}."""

    def __init__(self, total: int, pid: int | str = "self") -> None:
        self.total = max(1, total)
        self.pid = pid
        self.points: list[dict] = []
        self._sample(0)
        self._next = 1  # the next 1/RSS_SAMPLES to sample

    def _sample(self, done: int) -> None:
        m = proc_memory_mb(self.pid)
        self.points.append({"inputs": done, "rss_mb": round(m.get("VmRSS", 0.0), 2),
                            "anon_mb": round(m.get("RssAnon", 0.0), 2)})

    def tick(self, done: int) -> None:
        """Call after each input with the inputs done so far."""
        if self._next <= RSS_SAMPLES and done * RSS_SAMPLES >= self._next * self.total:
            self._sample(done)
            self._next = (done * RSS_SAMPLES) // self.total + 1

    def peak(self) -> float:
        """The peak RSS so far (VmHWM)."""
        return round(max(proc_memory_mb(self.pid).get("VmHWM", 0.0), *(p["rss_mb"] for p in self.points)), 2)

    def finish(self, done: int) -> float:
        """A last point if the run stopped short of one (a time limit); returns the peak RSS."""
        if self.points[-1]["inputs"] != done:
            self._sample(done)
        return self.peak()


@dataclass
class FuzzStats:
    protocol: str
    level: str
    engine: str
    frames: int = 0
    crashes: int = 0
    hangs: int = 0
    waits: int = 0
    codes: dict = field(default_factory=dict)      # error code (or "closed") -> count
    crash_samples: list = field(default_factory=list)
    seconds: float = 0.0
    rss_curve: list = field(default_factory=list)  # RssCurve.points
    peak_rss_mb: float = 0.0
    extra: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        curve = self.rss_curve
        return {"protocol": self.protocol, "level": self.level, "engine": self.engine, "frames": self.frames,
                "seconds": round(self.seconds, 2),
                "frames_per_s": round(self.frames / self.seconds) if self.seconds else 0,
                "crashes": self.crashes, "hangs": self.hangs, "waits_by_design": self.waits,
                "distinct_error_codes": len(self.codes),
                "error_codes": {str(k): v for k, v in sorted(self.codes.items(), key=lambda kv: str(kv[0]))},
                "crash_samples": self.crash_samples[:10],
                "rss_start_mb": curve[0]["rss_mb"] if curve else 0.0,
                "rss_end_mb": curve[-1]["rss_mb"] if curve else 0.0,
                "peak_rss_mb": self.peak_rss_mb, "rss_curve": curve,
                "memory": memory_verdict(self.rss_curve), **self.extra}


class _Recorder:
    """Runs one input through a target and books the outcome; new outcomes join the corpus."""

    def __init__(self, stats: FuzzStats, target, crash_dir: str | None, hang_s: float, use_alarm: bool):
        self.stats = stats
        self.target = target
        self.crash_dir = crash_dir
        self.hang_s = hang_s
        self.use_alarm = use_alarm and threading.current_thread() is threading.main_thread()
        self.errors = _ErrorLog()
        self.seen: dict = {}  # outcome -> None, in insertion order, at most SEEN_MAX
        self._saved = {}
        for name in ("rmq", "kafka_bridge"):  # ERROR records reach our counter (and stop there)
            lg = logging.getLogger(name)
            self._saved[name] = (lg.level, lg.propagate)
            lg.setLevel(logging.ERROR)
            lg.propagate = False
            lg.addHandler(self.errors)
        if self.use_alarm:
            signal.signal(signal.SIGALRM, self._alarm)

    @staticmethod
    def _alarm(signum, frame):
        raise FuzzHang()

    def close(self) -> None:
        for name in ("rmq", "kafka_bridge"):
            lg = logging.getLogger(name)
            lg.removeHandler(self.errors)
            lg.level, lg.propagate = self._saved[name]
        if self.use_alarm:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, signal.SIG_DFL)

    def _save(self, kind: str, data: bytes, why: str) -> None:
        st = self.stats
        if len(st.crash_samples) < 50:
            st.crash_samples.append({"kind": kind, "why": why[:300], "input_hex": data[:256].hex()})
        if self.crash_dir:
            os.makedirs(self.crash_dir, exist_ok=True)
            name = f"{st.protocol}-{kind}-{st.frames}.bin"
            with open(os.path.join(self.crash_dir, name), "wb") as fh:
                fh.write(data)

    def run(self, data: bytes) -> bool:
        """True when the input gave an outcome not seen before."""
        st = self.stats
        st.frames += 1
        before = self.errors.count
        outcome: tuple = ()
        try:
            if self.use_alarm:
                signal.setitimer(signal.ITIMER_REAL, self.hang_s * 4)
            try:
                outcome = self.target.run(data)
            finally:
                if self.use_alarm:
                    signal.setitimer(signal.ITIMER_REAL, 0)
        except FuzzHang:
            st.hangs += 1
            self._save("hang", data, "no progress within the hang timeout (synchronous)")
            self.target.reset()
            return False
        except Exception as exc:  # noqa: BLE001 - a crash: the listener let it escape
            st.crashes += 1
            self._save("crash", data, f"{type(exc).__name__}: {exc}")
            self.target.reset()
            return False
        if self.errors.count != before:
            st.crashes += 1
            self._save("crash", data, self.errors.last)
        key, codes, verdict = outcome
        for c in codes:
            st.codes[c] = st.codes.get(c, 0) + 1
        if verdict == "hang":
            st.hangs += 1
            self._save("hang", data, key)
        elif verdict == "wait":
            st.waits += 1
        if key not in self.seen:
            self.seen[key] = None
            if len(self.seen) > SEEN_MAX:
                del self.seen[next(iter(self.seen))]
            return True
        return False


# -------------------------------------------------------------------------------------- protocols
def protocols() -> dict:
    """name -> protocol object: remoting from here, the others from plugins' `fuzz_protocols`."""
    from rmq.plugins import load_plugins
    out = {"remoting": RemotingFuzzProtocol()}
    for plugin in load_plugins():
        for name, proto in (getattr(plugin, "fuzz_protocols", None) or {}).items():
            out[name] = proto
    return out


class _FakeTransport:
    """What RemotingConnection needs of an asyncio transport, writing into a list."""

    def __init__(self, proto) -> None:
        self.proto = proto
        self.out: list[bytes] = []
        self.closing = False

    def get_extra_info(self, name, default=None):
        return {"peername": ("127.0.0.1", 40000), "sockname": ("127.0.0.1", 10911)}.get(name, default)

    def write(self, data) -> None:
        self.out.append(bytes(data))

    def writelines(self, parts) -> None:
        self.out.append(b"".join(bytes(p) for p in parts))

    def is_closing(self) -> bool:
        return self.closing

    def abort(self) -> None:
        self.close()

    def close(self) -> None:
        self.closing = True

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


class RemotingTarget:
    """FrameDecoder -> RemotingCommand.decode -> Dispatcher -> the broker's processors (the ones
    `rmq up` registers) over a BrokerController on a temp store; one fake connection per input."""

    def __init__(self, hang_s: float = 1.0, config: dict | None = None) -> None:
        import asyncio

        from rmq.broker.controller import BrokerController
        from rmq.config import load_config
        from rmq.server.processors import BrokerServices, register_all
        from rmq.server.remoting_server import RemotingServer
        self.hang_s = hang_s
        self.root = tempfile.mkdtemp(prefix="rmq-fuzz-remoting-")
        self.ctl = BrokerController(load_config(None, {"storePathRootDir": self.root, "listenPort": 10911,
                                                       "mappedFileSizeCommitLog": 64 * 1024 * 1024, **(config or {})}))
        self.ctl.start()
        self.ctl.create_topic("FuzzSeed", 2)
        self.loop = asyncio.new_event_loop()
        self.server = RemotingServer("fuzz-broker", max_idle_s=0)
        self.svc = BrokerServices(self.ctl, broker_addr="127.0.0.1:10911")
        procs = register_all(self.server, self.svc)
        if procs["send"].fast is not None:  # as BrokerListener.start: sends answered from the frame
            self.server.fast_frame = procs["send"].fast.on_frame
        svc = self.svc
        self.server.close_listeners.append(lambda c: (svc.producer_manager.do_channel_close_event(c),
                                                      svc.consumer_manager.do_channel_close_event(c)))

    def reset(self) -> None:
        for c in list(self.server.connections):
            c.connection_lost(None)

    def run(self, data: bytes) -> tuple:
        return self.loop.run_until_complete(self._run(data))

    async def _run(self, data: bytes) -> tuple:
        import asyncio

        from rmq.remoting import RemotingCommand, request_code_name
        from rmq.remoting.frame import FrameDecoder
        from rmq.server.remoting_server import RemotingConnection
        conn = RemotingConnection(self.server)
        tr = _FakeTransport(conn)
        conn.connection_made(tr)
        verdict = ""
        try:
            conn.data_received(data)
            tasks = [t for t in self.server._tasks if not t.done()]
            if tasks:  # a held PULL_MESSAGE (long polling) is the one request that waits by design
                _, pending = await asyncio.wait(tasks, timeout=min(0.05, self.hang_s))
                if pending and not self.waits(data):
                    _, pending = await asyncio.wait(pending, timeout=self.hang_s)
                if pending:
                    verdict = "wait"
                    for t in pending:
                        t.cancel()
                    await asyncio.gather(*pending, return_exceptions=True)
                    if conn.inflight:
                        conn.inflight = 0
        finally:
            conn.connection_lost(None)
        codes: list = []
        req_codes = "?"
        try:
            req_codes = ",".join(request_code_name(RemotingCommand.decode(p).code)
                                 for p in FrameDecoder().feed(data)[:2])
        except Exception:  # noqa: BLE001 - the input is garbage: fine
            pass
        try:
            for payload in FrameDecoder().feed(b"".join(tr.out)):
                codes.append(RemotingCommand.decode(payload).code)
        except Exception as exc:  # noqa: BLE001 - our own response does not decode: a bug
            raise RuntimeError(f"the broker's response does not decode: {exc}") from exc
        if tr.closing and not codes:
            codes.append("closed")
        elif not codes:
            codes.append("no-response")  # an incomplete frame, or a oneway request
        if verdict == "wait" and not self.waits(data):
            verdict = "hang"
        return (f"{req_codes}->{sorted(map(str, codes))}", codes, verdict)

    waits = staticmethod(lambda data: RemotingFuzzProtocol.waits(None, data))

    def close(self) -> None:
        self.loop.run_until_complete(self.server.cancel_tasks())
        self.loop.close()
        self.svc.shutdown()
        self.ctl.shutdown()
        shutil.rmtree(self.root, ignore_errors=True)


class RemotingFuzzProtocol:
    name = "remoting"
    listener = "remoting"

    def seeds(self) -> list[bytes]:
        """Recorded client frames, the same re-encoded with the ROCKETMQ header format, and every
        request code with an empty header."""
        from rmq.remoting import RemotingCommand, RequestCode, SerializeType
        recorded = load_seed_file(os.path.join(SEEDS_DIR, "remoting.bin"))
        out = list(recorded)
        for f in recorded:
            try:
                cmd = RemotingCommand.decode(f[4:])
                cmd.serialize_type = SerializeType.ROCKETMQ
                out.append(cmd.encode())
            except Exception:  # noqa: BLE001
                pass
        for name, code in sorted(vars(RequestCode).items()):
            if name.isupper() and isinstance(code, int):
                out.append(RemotingCommand.request(code, {}, b"", opaque=1).encode())
        return out

    def mutate_fields(self, p: bytearray, rng: random.Random) -> bytearray:
        if len(p) < 4:
            return p
        r = rng.random()
        if r < 0.15:  # serialize type byte
            p[0] = rng.choice((0, 1, 2, 0x7F, 0xFF))
        elif r < 0.3:  # header length (low 3 bytes)
            p[1:4] = rng.choice((0, 1, 0xFFFFFF, len(p), len(p) - 3, max(0, len(p) - 5))).to_bytes(3, "big")
        elif p[0] == 0:  # a JSON header: edit a value in its structure and re-encode
            hlen = int.from_bytes(p[1:4], "big")
            try:
                obj = json.loads(bytes(p[4:4 + hlen]))
            except ValueError:
                return p
            if not isinstance(obj, dict):
                return p
            ext = obj.get("extFields") if isinstance(obj.get("extFields"), dict) else None
            tgt = ext if ext and rng.random() < 0.6 else obj
            if tgt:
                k = rng.choice(list(tgt))
                tgt[k] = rng.choice((None, -1, 2 ** 63, -2 ** 63, 2 ** 31, "", "x" * 300, "-1", "9" * 30, "1e308",
                                     [], {}, True, 1.5, "\u0000", "\ud800", str(rng.randrange(-5, 400))))
                if rng.random() < 0.2:
                    del tgt[k]
            hdr = json.dumps(obj).encode()
            p = bytearray(len(hdr).to_bytes(4, "big")) + hdr + p[4 + hlen:]
        else:  # ROCKETMQ header: code(2) lang(1) version(2) opaque(4) flag(4) remark(4+n) ext(4+n)
            i = rng.choice((4, 7, 9, 13, 17))
            if i + 4 <= len(p):
                p[i:i + 4] = struct.pack(">i", rng.choice(INTERESTING_32 if i >= 9 else (0, -1, 0x7FFFFFFF)))
        return p

    def make_target(self, hang_s: float, config: dict | None = None):
        return RemotingTarget(hang_s, config)

    def probe(self) -> bytes:
        from rmq.remoting import RemotingCommand, RequestCode
        return RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO, {}, opaque=7).encode()

    def probe_ok(self, resp: bytes) -> bool:
        from rmq.remoting import RemotingCommand
        return len(resp) > 4 and RemotingCommand.decode_frame(resp).code == 0

    def response_codes(self, request: bytes, response: bytes) -> list:
        from rmq.remoting import RemotingCommand
        from rmq.remoting.frame import FrameDecoder
        return [RemotingCommand.decode(p).code for p in FrameDecoder().feed(response)]

    def waits(self, request: bytes) -> bool:
        from rmq.remoting import RemotingCommand, RequestCode
        try:
            return any(RemotingCommand.decode(f[4:]).code == RequestCode.PULL_MESSAGE for f in split_frames(request))
        except Exception:  # noqa: BLE001
            return False


# -------------------------------------------------------------------------------------- engines
def run_inprocess_random(proto, frames: int, *, seed: int = 1, hang_s: float = 1.0, crash_dir: str | None = None,
                         time_limit: float | None = None, progress=None) -> FuzzStats:
    """Structure-aware mutation of the seeds, outcome-guided (an input with a new outcome joins the corpus)."""
    rng = random.Random(seed)
    seeds = proto.seeds()
    corpus = Corpus(seeds, rng)
    mut = Mutator(rng, corpus, proto.mutate_fields)
    target = proto.make_target(hang_s, FUZZ_BROKER_CONFIG)
    st = FuzzStats(proto.name, "inprocess", "random")
    rec = _Recorder(st, target, crash_dir, hang_s, use_alarm=True)
    try:
        for s in seeds:  # warm up on the seeds themselves (codecs compiled, topics made)
            target.run(s)
        rss = RssCurve(frames)
        st.rss_curve = rss.points
        t0 = time.perf_counter()
        deadline = None if time_limit is None else time.monotonic() + time_limit
        for i in range(frames):
            data = seeds[i] if i < len(seeds) else mut.mutate(rng.choice(corpus))
            if rec.run(data):
                corpus.add(data)
            rss.tick(i + 1)
            if progress is not None and i % 2000 == 0:
                progress(i)
            if deadline is not None and i % 256 == 0 and time.monotonic() > deadline:
                break
        st.seconds = time.perf_counter() - t0
        st.peak_rss_mb = rss.finish(st.frames)
        st.extra.update(corpus=len(corpus), corpus_kb=corpus.nbytes // 1024)
    finally:
        rec.close()
        target.close()
    return st


def _atheris_child(proto_name: str, frames: int, seed: int, hang_s: float, crash_dir: str | None,
                   out_path: str, log_path: str) -> None:  # pragma: no cover - runs in a forked child
    import atheris
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 2)
    os.dup2(fd, 1)
    proto = protocols()[proto_name]
    rng = random.Random(seed)
    seeds = proto.seeds()
    mut = Mutator(rng, list(seeds), proto.mutate_fields, max_len=8192)
    target = proto.make_target(hang_s, FUZZ_BROKER_CONFIG)
    st = FuzzStats(proto.name, "inprocess", "atheris")
    rec = _Recorder(st, target, crash_dir, hang_s, use_alarm=False)  # libFuzzer owns SIGALRM (-timeout)
    for s in seeds:
        target.run(s)
    corpus_dir = tempfile.mkdtemp(prefix=f"rmq-fuzz-corpus-{proto_name}-")
    with open(os.path.join(os.path.dirname(out_path), "leftovers"), "w") as fh:  # if libFuzzer ends us
        fh.write(f"{corpus_dir}\n{getattr(target, 'root', '')}\n")
    for i, s in enumerate(seeds):
        with open(os.path.join(corpus_dir, f"seed-{i}"), "wb") as fh:
            fh.write(s)
    rss = RssCurve(frames)
    st.rss_curve = rss.points
    t0 = time.perf_counter()

    def dump(final: bool) -> None:
        st.seconds = time.perf_counter() - t0
        st.peak_rss_mb = rss.finish(st.frames) if final else rss.peak()
        st.extra["complete"] = final
        tmp = out_path + ".tmp"
        with open(tmp, "w") as fh:
            json.dump(st.as_dict(), fh)
        os.replace(tmp, out_path)

    def one_input(data: bytes) -> None:
        rec.run(data)
        rss.tick(st.frames)
        if st.frames % 20000 == 0:
            dump(False)
        if st.frames >= frames:
            dump(True)
            finish()

    def finish() -> None:
        shutil.rmtree(corpus_dir, ignore_errors=True)
        try:
            rec.close()
            target.close()  # the broker's temp store
        finally:
            os._exit(0)

    def custom_mutator(data: bytes, max_size: int, s: int) -> bytes:
        rng.seed(s)
        if rng.random() < 0.5:
            return atheris.Mutate(data, max_size)
        return mut.mutate(data)[:max_size]

    _instrument_project(atheris)
    if crash_dir:
        os.makedirs(crash_dir, exist_ok=True)  # libFuzzer writes its crash-/timeout- files there
    atheris.Setup([sys.argv[0], "-max_len=8192", f"-timeout={max(2, int(hang_s * 10))}", "-rss_limit_mb=4096",
                   f"-seed={seed}", f"-runs={frames * 2}", "-print_final_stats=1",
                   f"-artifact_prefix={os.path.join(crash_dir or os.path.dirname(out_path), '')}", corpus_dir],
                  one_input, custom_mutator=custom_mutator)
    atheris.Fuzz()
    dump(True)
    finish()


def _instrument_project(atheris) -> int:  # pragma: no cover - atheris child only
    """Coverage for the project's own code only (rmq, kafka_bridge; not the benches, not the
    standard library): every function and method of their loaded modules, and the functions
    kept in module-level dicts (the Kafka codecs compiled at run time). Several times faster per
    input than atheris.instrument_all() for the same guidance where the bugs would be."""
    import types
    done: set[int] = set()

    def inst(fn) -> None:
        if isinstance(fn, (staticmethod, classmethod)):
            fn = fn.__func__
        if isinstance(fn, types.FunctionType) and id(fn.__code__) not in done:
            try:
                atheris.instrument_func(fn)
                done.add(id(fn.__code__))
            except Exception:  # noqa: BLE001 - some code objects cannot be patched: skip them
                pass

    for name, mod in list(sys.modules.items()):
        if not (name.startswith(("rmq.", "kafka_bridge.")) and ".bench" not in name) or mod is None:
            continue
        for obj in list(vars(mod).values()):
            if isinstance(obj, type) and getattr(obj, "__module__", "") == name:
                for attr in list(vars(obj).values()):
                    inst(attr)
            elif isinstance(obj, dict):
                for v in list(obj.values())[:10000]:
                    inst(v)
            else:
                inst(obj)
    return len(done)


def run_inprocess_atheris(proto_name: str, frames: int, *, seed: int = 1, hang_s: float = 1.0,
                          crash_dir: str | None = None, progress=None) -> FuzzStats:
    """libFuzzer (atheris) in a forked child: it instruments every loaded module for coverage and
    never returns; the child writes its figures to a file the parent reads."""
    import multiprocessing
    work = tempfile.mkdtemp(prefix="rmq-fuzz-atheris-")
    out_path, log_path = os.path.join(work, "stats.json"), os.path.join(work, "libfuzzer.log")
    proc = multiprocessing.get_context("fork").Process(
        target=_atheris_child, args=(proto_name, frames, seed, hang_s, crash_dir, out_path, log_path), daemon=True)
    proc.start()
    while proc.is_alive():
        proc.join(1.0)
        if progress is not None and os.path.exists(out_path):
            try:
                with open(out_path) as fh:
                    progress(json.load(fh)["frames"])
            except (OSError, ValueError, KeyError):
                pass
    st = FuzzStats(proto_name, "inprocess", "atheris")
    try:
        with open(out_path) as fh:
            d = json.load(fh)
    except (OSError, ValueError):
        d = {}
    for k in ("frames", "crashes", "hangs", "seconds", "rss_curve", "peak_rss_mb"):
        if k in d:
            setattr(st, k, d[k])
    st.waits = d.get("waits_by_design", 0)
    st.codes = d.get("error_codes", {})
    st.crash_samples = d.get("crash_samples", [])
    cov = ""
    try:
        with open(log_path, errors="replace") as fh:
            lines = fh.read().splitlines()
        covs = [ln for ln in lines if " cov: " in ln]
        cov = covs[-1] if covs else ""
        deadly = [ln for ln in lines if "ERROR: libFuzzer" in ln or "Uncaught Python exception" in ln]
    except OSError:
        lines, deadly = [], []
    if not d.get("complete"):  # libFuzzer stopped the child: a timeout (hang) or an escaped crash
        if any("timeout" in ln for ln in deadly):
            st.hangs += 1
        else:
            st.crashes += 1
        st.crash_samples.append({"kind": "libfuzzer", "why": " | ".join(deadly[-3:]) or f"exit {proc.exitcode}"})
        if crash_dir:
            os.makedirs(crash_dir, exist_ok=True)
            shutil.copy(log_path, os.path.join(crash_dir, f"{proto_name}-libfuzzer.log"))
    st.extra["libfuzzer"] = cov.split("\t", 1)[-1].strip() if cov else ""
    try:  # the child's temp store and corpus, when libFuzzer stopped it before it cleaned up
        with open(os.path.join(work, "leftovers")) as fh:
            for path in filter(None, fh.read().splitlines()):
                shutil.rmtree(path, ignore_errors=True)
    except OSError:
        pass
    shutil.rmtree(work, ignore_errors=True)
    return st


# -------------------------------------------------------------------------------------- sockets
def _recv_until_eof(sock: socket.socket, deadline: float, limit: int = 1 << 22) -> tuple[bytes, bool]:
    """Read until the server closes (or `limit` bytes); (data, True) unless the deadline passed."""
    chunks, n = [], 0
    while n < limit:
        left = deadline - time.monotonic()
        if left <= 0:
            return b"".join(chunks), False
        sock.settimeout(left)
        try:
            b = sock.recv(1 << 16)
        except socket.timeout:
            return b"".join(chunks), False
        except OSError:  # reset by the server: a closed connection
            break
        if not b:
            break
        chunks.append(b)
        n += len(b)
    return b"".join(chunks), True


def _recv_frame(sock: socket.socket, timeout: float) -> bytes:
    deadline = time.monotonic() + timeout
    buf = b""
    while True:
        if len(buf) >= 4:
            (n,) = _I32.unpack_from(buf)
            if len(buf) >= 4 + n:
                return buf[:4 + n]
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("no answer in time")
        sock.settimeout(left)
        b = sock.recv(1 << 16)
        if not b:
            raise ConnectionError("closed")
        buf += b


class EmbeddedUp:
    """`rmq up` in a child process on free ports, with a config file; stop() ends it."""

    def __init__(self, config: dict | None = None) -> None:
        self.dir = tempfile.mkdtemp(prefix="rmq-fuzz-up-")
        self.cfg_path = os.path.join(self.dir, "broker.yaml")
        import yaml
        with open(self.cfg_path, "w") as fh:
            yaml.safe_dump(config or {}, fh)
        self.ready = os.path.join(self.dir, "ready.json")
        self.log_path = os.path.join(self.dir, "rmq-up.log")
        self.proc: subprocess.Popen | None = None
        self.listeners: dict = {}

    def start(self, timeout: float = 60.0) -> dict:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen([sys.executable, "-m", "rmq.cli", "up", "--config", self.cfg_path,
                                      "--data", os.path.join(self.dir, "store"), "--namesrv-port", "0",
                                      "--remoting-port", "0", "--kafka-port", "0", "--console-port", "0",
                                      "--ready-file", self.ready],
                                     stdout=self._log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if os.path.exists(self.ready):
                with open(self.ready) as fh:
                    self.listeners = json.load(fh)
                return self.listeners
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"rmq up did not start: {self.log_text()[-2000:]}")

    def addr(self, listener: str) -> tuple[str, int]:
        host, _, port = self.listeners[listener].rpartition(":")
        return host, int(port)

    def log_text(self) -> str:
        try:
            with open(self.log_path, errors="replace") as fh:
                return fh.read()
        except OSError:
            return ""

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        if getattr(self, "_log", None) is not None:
            self._log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def run_socket(proto, frames: int, *, up: EmbeddedUp | None = None, seed: int = 1, hang_s: float = 5.0,
               workers: int = 8, crash_dir: str | None = None, probe_every: int = 200, progress=None) -> FuzzStats:
    """Every input on a new connection to a real `rmq up`: send, half-close, read to EOF with a deadline."""
    own = up is None
    if own:
        up = EmbeddedUp(FUZZ_BROKER_CONFIG)
        up.start()
    st = FuzzStats(proto.name, "socket", "random")
    addr = up.addr(proto.listener)
    seeds = proto.seeds()
    lock = threading.Lock()
    counter = iter(range(frames))
    probes = {"ok": 0, "failed": 0}
    healthy = socket.create_connection(addr, timeout=5)
    rss = RssCurve(frames, up.proc.pid)
    st.rss_curve = rss.points
    recorder_dir = crash_dir

    conn = {"healthy": healthy}

    def probe() -> None:
        # as long as a hang counts (hang_s): on a loaded machine an answer may take seconds. A probe that
        # failed leaves its answer unread on the connection, so the next probe opens a new one rather
        # than read that late answer as its own (one slow probe would fail all the rest)
        try:
            conn["healthy"].sendall(proto.probe())
            ok = proto.probe_ok(_recv_frame(conn["healthy"], max(5.0, hang_s)))
        except (OSError, ValueError, TimeoutError, ConnectionError):
            ok = False
        if not ok:
            conn["healthy"].close()
            try:
                conn["healthy"] = socket.create_connection(addr, timeout=max(5.0, hang_s))
            except OSError:
                pass
        probes["ok" if ok else "failed"] += 1

    def save(kind: str, data: bytes, why: str) -> None:
        if len(st.crash_samples) < 50:
            st.crash_samples.append({"kind": kind, "why": why, "input_hex": data[:256].hex()})
        if recorder_dir:
            os.makedirs(recorder_dir, exist_ok=True)
            with open(os.path.join(recorder_dir, f"{proto.name}-socket-{kind}-{time.time_ns()}.bin"), "wb") as fh:
                fh.write(data)

    def worker(wid: int) -> None:
        rng = random.Random(seed * 1000 + wid)
        mut = Mutator(rng, list(seeds), proto.mutate_fields)
        while True:
            with lock:
                i = next(counter, None)
            if i is None:
                return
            data = seeds[i] if i < len(seeds) else mut.mutate(rng.choice(seeds))
            codes: list = []
            try:
                s = socket.create_connection(addr, timeout=hang_s)
            except OSError as exc:
                with lock:
                    st.hangs += 1
                    save("connect", data, f"cannot connect: {exc}")
                continue
            try:
                try:
                    s.sendall(data)
                    s.shutdown(socket.SHUT_WR)
                except OSError:
                    pass  # the server closed first (a bad prefix): fine
                resp, done = _recv_until_eof(s, time.monotonic() + hang_s)
            finally:
                s.close()
            try:
                codes = proto.response_codes(data, resp) if resp else []
            except Exception as exc:  # noqa: BLE001
                with lock:
                    st.crashes += 1
                    save("bad-response", data, f"{type(exc).__name__}: {exc}")
            with lock:
                st.frames += 1
                for c in codes or ["closed"]:
                    st.codes[c] = st.codes.get(c, 0) + 1
                if not done:
                    if proto.waits(data):
                        st.waits += 1
                    else:
                        st.hangs += 1
                        save("hang", data, f"no answer and no close within {hang_s} s")
                rss.tick(st.frames)
                if st.frames % probe_every == 0:
                    probe()
                    if progress is not None:
                        progress(st.frames)

    t0 = time.perf_counter()
    try:
        threads = [threading.Thread(target=worker, args=(w,), daemon=True) for w in range(workers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        st.seconds = time.perf_counter() - t0
        probe()
        st.peak_rss_mb = rss.finish(st.frames)
        text = up.log_text()
        tracebacks = text.count("Traceback (most recent call last)")
        st.crashes += tracebacks + (0 if up.alive() else 1)
        st.extra.update({"server_alive": up.alive(), "server_tracebacks": tracebacks,
                         "probes_ok": probes["ok"], "probes_failed": probes["failed"],
                         "server_rss_growth_mb": round(st.rss_curve[-1]["rss_mb"] - st.rss_curve[0]["rss_mb"], 1)})
        if tracebacks:
            i = text.find("Traceback (most recent call last)")
            st.crash_samples.append({"kind": "server-log", "why": text[max(0, i - 300):i + 1500]})
    finally:
        conn["healthy"].close()
        if own:
            up.stop()
    return st


# -------------------------------------------------------------------------------------- command
def _print(st: dict) -> None:
    click.echo(f"{st['protocol']} ({st['level']}, {st['engine']}): {st['frames']:,} frames in {st['seconds']} s "
               f"= {st['frames_per_s']:,} frames/s")
    click.echo(f"  crashes {st['crashes']}   hangs {st['hangs']}   waits by design {st['waits_by_design']}   "
               f"distinct error codes {st['distinct_error_codes']}")
    codes = ", ".join(f"{k}:{v}" for k, v in sorted(st["error_codes"].items(), key=lambda kv: -kv[1])[:12])
    click.echo(f"  codes (most frequent): {codes}")
    whose = "the broker process" if st["level"] == "socket" else "this process"
    click.echo(f"  RSS of {whose}: start {st['rss_start_mb']:.1f} MB   end {st['rss_end_mb']:.1f} MB   "
               f"peak (VmHWM) {st['peak_rss_mb']:.1f} MB")
    click.echo("  RSS curve, inputs: VmRSS / RssAnon MB: "
               + "  ".join(f"{p['inputs']:,}: {p['rss_mb']:.1f}/{p['anon_mb']:.1f}" for p in st["rss_curve"]))
    click.echo(f"  memory: {_memory_line(st['memory'])}")
    if st.get("libfuzzer"):
        click.echo(f"  libFuzzer: {st['libfuzzer']}")
    if "probes_ok" in st:
        click.echo(f"  healthy connection probes: {st['probes_ok']} ok, {st['probes_failed']} failed; "
                   f"server alive: {st['server_alive']}; tracebacks in its log: {st['server_tracebacks']}")
    for s in st["crash_samples"][:5]:
        click.echo(f"  {s['kind']}: {s['why'][:200]}")


def _memory_line(m: dict) -> str:
    if m["bounded"] is None:
        return f"no verdict ({m['why']}); rule: {m['rule']}"
    word = "bounded" if m["bounded"] else "GROWS"
    return (f"{word}: {m['growth_mb']:+} MB from input {m['from_input']:,} to {m['to_input']:,} "
            f"({m['growth_mb_per_100k']} MB per 100,000), allowed {m['allowed_mb']} MB; rule: {m['rule']}")


def atheris_available() -> bool:
    try:
        import atheris  # noqa: F401
    except ImportError:
        return False
    return True


@click.command("fuzz", help=f"""Fuzz the Kafka and RocketMQ remoting listeners with mutated real-client
frames; print frames/s, crashes, hangs, distinct error codes and the RSS curve of the target (the
broker process with --level socket, this process in-process), sampled at every 10% of the inputs.

Memory verdict: bounded when {MEMORY_RULE}.

Exits 1 on any crash or hang, or when memory is not bounded.""")
@click.option("--protocol", type=click.Choice(["kafka", "remoting", "both"]), default="both", show_default=True)
@click.option("--frames", type=int, default=100_000, show_default=True, help="Inputs per protocol (each one or more frames).")
@click.option("--level", type=click.Choice(["inprocess", "socket"]), default="inprocess", show_default=True,
              help="Codec + dispatch against a broker object, or a real `rmq up` over sockets.")
@click.option("--engine", type=click.Choice(["auto", "atheris", "random"]), default="auto", show_default=True,
              help="In-process: atheris (coverage-guided, when installed) or the random mutator.")
@click.option("--seed", type=int, default=1, show_default=True)
@click.option("--hang-timeout", type=float, default=None, help="Seconds before an input counts as a hang "
              "(default 1 in-process, 5 over sockets).")
@click.option("--workers", type=int, default=8, show_default=True, help="Socket level: concurrent connections.")
@click.option("--crash-dir", type=click.Path(file_okay=False), help="Save crashing and hanging inputs here.")
@click.option("--json", "as_json", is_flag=True)
def bench_fuzz(protocol, frames, level, engine, seed, hang_timeout, workers, crash_dir, as_json) -> None:
    if frames <= 0:
        raise click.BadParameter("expected a positive number", param_hint="--frames")
    protos = protocols()
    names = ["kafka", "remoting"] if protocol == "both" else [protocol]
    for n in names:
        if n not in protos:
            raise click.ClickException(f"the {n} protocol is not available (the kafka_bridge plugin is not installed)")
    if engine == "auto":
        engine = "atheris" if atheris_available() else "random"
    if engine == "atheris" and not atheris_available():
        from rmq.extras import MissingExtra
        raise MissingExtra("atheris", "`rmq bench fuzz --engine atheris`")
    hang_s = hang_timeout or (5.0 if level == "socket" else 1.0)
    logging.basicConfig(level=logging.CRITICAL)  # the listeners' warnings for bad frames are expected
    results = []
    up = None
    try:
        if level == "socket":
            up = EmbeddedUp(FUZZ_BROKER_CONFIG)
            up.start()
        for n in names:
            bar = None
            progress = None
            if not as_json and sys.stderr.isatty():
                from rich.progress import Progress
                bar = Progress(transient=True)
                task = bar.add_task(f"fuzzing {n}", total=frames)
                bar.start()
                progress = lambda done, _b=bar, _t=task: _b.update(_t, completed=done)  # noqa: E731
            try:
                if level == "socket":
                    st = run_socket(protos[n], frames, up=up, seed=seed, hang_s=hang_s, workers=workers,
                                    crash_dir=crash_dir, progress=progress)
                elif engine == "atheris":
                    st = run_inprocess_atheris(n, frames, seed=seed, hang_s=hang_s, crash_dir=crash_dir,
                                               progress=progress)
                else:
                    st = run_inprocess_random(protos[n], frames, seed=seed, hang_s=hang_s, crash_dir=crash_dir,
                                              progress=progress)
            finally:
                if bar is not None:
                    bar.stop()
            results.append(st.as_dict())
    finally:
        if up is not None:
            up.stop()
    if as_json:
        click.echo(json.dumps(results))
    else:
        for r in results:
            _print(r)
    if any(r["crashes"] or r["hangs"] or r["memory"]["bounded"] is False for r in results):
        sys.exit(1)
