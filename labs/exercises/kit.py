"""What a checker uses: a case result, comparisons that say what was expected, and a live broker.

A checker module (labs/exercises/<name>/checker.py) defines

    def offline(sol) -> Iterator[(name, fn)]     # hidden cases against the student's module `sol`
    def live(sol, broker) -> Iterator[(name, fn)]   # optional: cases against a running broker
    def broker_config(sol) -> dict | None        # optional: the broker config the live cases need
                                                 # (None: no `rmq up`, the live cases start their own)

where fn() returns a Case (its name is set from the pair). The generators only name cases: they run
nothing before a yield (a live scenario runs inside the first case that needs it, through Once), and
their names do not depend on the student's code, so `check` lists and counts them with sol=None and
broker=None before running anything.

The child process (labs.exercises.child) runs them with a time limit per case and writes each case's
result for the parent; the student's prints and exceptions never reach the results channel."""
from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import asdict, dataclass, field

import yaml


@dataclass
class Case:
    name: str
    ok: bool
    expected: str = ""
    got: str = ""
    hint: str = ""

    def as_dict(self) -> dict:
        return asdict(self)


def load_broker_dict(d):
    """A student's dict of broker.yaml keys read as `rmq broker -c` reads a file: (BrokerConfig, "")
    or (None, the config error with the temporary file's name replaced by "the dict")."""
    from rmq.config import ConfigError, load_config
    if not isinstance(d, dict):
        return None, f"expected a dict of broker.yaml keys, got {type(d).__name__}"
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as fh:
        yaml.safe_dump(d, fh)
        path = fh.name
    try:
        return load_config(path), ""
    except ConfigError as exc:
        return None, str(exc).replace(path, "the dict")
    finally:
        os.unlink(path)


def shutdown_within(clients, seconds: float = 5.0) -> bool:
    """Shut `clients` down one after the other in a helper thread, waiting at most `seconds`; True when
    all of them finished. A client whose event loop the student's code holds (a loop in the allocate
    a rebalance calls on it) cannot finish: its shutdown would wait out its own 15 s timeout per
    client, and the checker's process ends soon after anyway (os._exit), taking the client along."""
    import threading

    def run() -> None:
        for c in clients:
            try:
                c.shutdown()
            except Exception:  # noqa: BLE001 - a client that fails to close does not change the verdict
                pass
    th = threading.Thread(target=run, name="checker-shutdown", daemon=True)
    th.start()
    th.join(seconds)
    return not th.is_alive()


def short(v, limit: int = 300) -> str:
    s = repr(v)
    return s if len(s) <= limit else s[:limit] + f"... ({len(s)} chars)"


def expect(got, expected, hint: str = "") -> Case:
    """A case that passes when got == expected; the message shows both."""
    return Case("", got == expected, short(expected), short(got), hint if got != expected else "")


def rule(ok: bool, expected: str, got, hint: str = "") -> Case:
    """A case with its own rule; `expected` says in words what the rule wants."""
    return Case("", bool(ok), expected, got if isinstance(got, str) else short(got), "" if ok else hint)


@dataclass
class Broker:
    """An embedded NameServer + broker + Kafka listener (`rmq up`) in a temporary directory, for the
    live cases. It runs in the checker's process group, so a checker that is killed takes it along."""
    config: dict = field(default_factory=dict)
    namesrv: str = ""
    remoting: str = ""
    bootstrap: str = ""
    workdir: str = ""
    _proc: object = None

    def __enter__(self) -> Broker:
        self.workdir = tempfile.mkdtemp(prefix="rmq-exercise-")
        cfg_path = os.path.join(self.workdir, "broker.yaml")
        with open(cfg_path, "w", encoding="utf-8") as fh:
            yaml.safe_dump(self.config, fh)
        try:
            self._start()
        except BaseException:
            shutil.rmtree(self.workdir, ignore_errors=True)
            raise
        return self

    def _start(self) -> None:
        from kafka_bridge.peers import start_embedded
        ready = os.path.join(self.workdir, "ready.json")
        if os.path.exists(ready):
            os.remove(ready)                 # a restart: wait for the new process's ports, not the old ones
        self._proc, addrs, _log = start_embedded(self.workdir, os.path.join(self.workdir, "broker.yaml"), timeout=45)
        self.namesrv, self.remoting, self.bootstrap = addrs["namesrv"], addrs["remoting"], addrs["kafka"]

    def kill9(self) -> None:
        """SIGKILL the broker process, as a crash does: no shutdown hook, no last flush."""
        self._proc.kill()
        self._proc.wait(15)

    def restart(self) -> None:
        """Start the broker again on the same store (after kill9): it recovers what its files hold. The
        ports are new (port 0), and so are namesrv, remoting and bootstrap."""
        self._start()

    @property
    def store_dir(self) -> str:
        return os.path.join(self.workdir, "store")

    def __exit__(self, *exc) -> None:
        from kafka_bridge.peers import stop_process
        if self._proc is not None:
            stop_process(self._proc)
        shutil.rmtree(self.workdir, ignore_errors=True)

    def create_topic(self, topic: str, queues: int = 4) -> None:
        from rmq.client.admin import MQAdmin
        with MQAdmin(namesrv=[self.namesrv]) as admin:
            admin.create_topic(topic, broker_addr=self.remoting, read_queue_nums=queues, write_queue_nums=queues)
            admin.wait_for_route(topic, queues=queues, timeout=30)


class Once:
    """A live scenario that several cases check: it runs inside the first case that asks for it (under
    that case's time limit, so a hang in it is reported there), and the later cases reuse its result.
    A checker's live() yields its cases without running anything, so the cases can be counted first."""

    def __init__(self, fn) -> None:
        self.fn = fn
        self.state = "new"
        self.value = None
        self.error = ""

    def __call__(self):
        if self.state == "new":
            self.state = "running"
            try:
                self.value = self.fn()
                self.state = "done"
            except BaseException as exc:
                self.state = "failed"
                self.error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
                raise
        if self.state != "done":
            raise RuntimeError(f"the live run did not complete, see the first live case ({self.error or 'stopped'})")
        return self.value
