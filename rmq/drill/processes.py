"""The processes a drill runs, each on fixed loopback ports chosen once so clients reach it again
after a SIGKILL and restart (issue 16): `rmq up` as one broker (BrokerProcess), or `rmq namesrv` with
a SYNC_MASTER and its SLAVE as `rmq broker -c` processes (MasterSlaveBrokers, SPEC §9). Both offer
what rmq/drill/kill.py drives: start_all, start / kill / stop of the broker it kills, the waits of
the deployment, and shutdown."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from typing import Callable

import yaml

READY_TIMEOUT_S = 60.0          # a broker process writes its ready file
SLAVE_CONNECT_TIMEOUT_S = 30.0  # the slave's HAClient retries every 5 s (RocketMQ's HAClient)
SLAVE_SETTLE_TIMEOUT_S = 15.0   # after the kill: the slave's HA connection closed, its reput done
CATCH_UP_TIMEOUT_S = 60.0       # after the restart: the slave holds the master's whole commitlog
POLL_S = 0.05


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(check: Callable[[], object], timeout: float, what: str):
    """Call `check` every POLL_S until it returns something true and return that; RuntimeError
    saying what was awaited after `timeout` seconds (exceptions from `check` count as not yet)."""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while True:
        try:
            got = check()
            if got:
                return got
        except Exception as exc:  # noqa: BLE001 - a broker that is still starting answers with errors
            last = exc
        if time.monotonic() >= deadline:
            raise RuntimeError(f"{what}: not within {timeout:.0f} s" + (f" (last error: {last})" if last else ""))
        time.sleep(POLL_S)


class ServerProcess:
    """One `rmq` sub-command as a child process, started again with the same arguments (so on the
    same ports) after every kill; up once it has written its --ready-file."""

    def __init__(self, name: str, args: list[str], workdir: str, log_path: str | None = None):
        self.name = name
        self.args = list(args)
        self.workdir = workdir
        self.ready_file = os.path.join(workdir, f"{name}.ready.json")
        self.log_path = log_path or os.path.join(workdir, f"{name}.log")
        self.proc: subprocess.Popen | None = None
        self.info: dict = {}

    def start(self, timeout: float = READY_TIMEOUT_S) -> float:
        """Start and wait until every listener is up; returns the seconds it took."""
        if self.proc is not None and self.proc.poll() is None:
            raise RuntimeError(f"the {self.name} process is already running (pid {self.proc.pid})")
        try:
            os.unlink(self.ready_file)
        except FileNotFoundError:
            pass
        cmd = [sys.executable, "-c", "from rmq.cli import main; main()", *self.args, "--ready-file", self.ready_file]
        env = dict(os.environ, RMQ_LOG="INFO")  # the recovery and HA lines the drill reports are INFO
        t0 = time.monotonic()
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=self.workdir, env=env)
        while not os.path.exists(self.ready_file):
            if self.proc.poll() is not None:
                raise RuntimeError(f"the {self.name} process exited with status {self.proc.returncode}; "
                                   f"see {self.log_path}")
            if time.monotonic() - t0 > timeout:
                self.kill()
                raise RuntimeError(f"the {self.name} process was not ready within {timeout:.0f} s; see {self.log_path}")
            time.sleep(0.01)
        took = time.monotonic() - t0
        with open(self.ready_file, encoding="utf-8") as fh:
            self.info = json.load(fh)
        return took

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)

    def stop(self) -> None:
        """SIGTERM (a clean shutdown), SIGKILL when it takes longer than 30 s."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()


def drill_broker_config(config_path: str | None) -> dict:
    """The broker YAML a drill starts from (the user's file or the defaults), with SYNC_FLUSH forced
    and topics created on first send."""
    cfg: dict = {}
    if config_path:
        with open(config_path, encoding="utf-8") as fh:
            cfg = yaml.safe_load(fh) or {}
        if not isinstance(cfg, dict):
            raise ValueError(f"{config_path}: expected a mapping of broker config keys")
    cfg["flushDiskType"] = "SYNC_FLUSH"
    cfg.setdefault("autoCreateTopicEnable", True)
    return cfg


def _write_yaml(path: str, cfg: dict) -> str:
    with open(path, "w", encoding="utf-8") as fh:
        yaml.safe_dump(cfg, fh)
    return path


class BrokerProcess:
    """`rmq up` with the drill's config, on the same ports at every start: the broker the drill kills."""

    def __init__(self, config_path: str | None, workdir: str, data: str | None = None, kafka: bool = True,
                 log_path: str | None = None):
        self.workdir = workdir
        cfg = drill_broker_config(config_path)
        cfg.pop("namesrvAddr", None)  # the embedded NameServer
        if cfg.get("brokerRole") == "SLAVE":
            cfg["brokerRole"] = "ASYNC_MASTER"
        # never the config's own store: the drill kills the broker over and over
        self.data = os.path.abspath(data or os.path.join(workdir, "store"))
        cfg["storePathRootDir"] = self.data
        self.config_path = _write_yaml(os.path.join(workdir, "drill-broker.yaml"), cfg)
        self.ports = {"namesrv": free_port(), "remoting": free_port(), "kafka": free_port() if kafka else 0}
        self.process = ServerProcess("broker", [
            "up", "--config", self.config_path, "--namesrv-port", str(self.ports["namesrv"]),
            "--remoting-port", str(self.ports["remoting"]), "--kafka-port", str(self.ports["kafka"]),
            "--console-port", "0"],
            workdir, log_path)
        self.listeners: dict = {}

    @property
    def log_path(self) -> str:
        return self.process.log_path

    def start(self, timeout: float = READY_TIMEOUT_S) -> float:
        """Start and wait until every listener is up; returns the seconds it took."""
        took = self.process.start(timeout)
        self.listeners = self.process.info
        return took

    def kill(self) -> None:
        self.process.kill()

    def stop(self) -> None:
        self.process.stop()

    # the drill's view of a deployment: start_all, waits, the killed broker's start/kill/stop, shutdown
    def start_all(self) -> None:
        self.start()

    def wait_serves(self, topic: str) -> None:
        """Nothing to wait for: one broker serves the topic once it is created."""

    def wait_replicating(self) -> float:
        """Nothing to wait for: no slave."""
        return 0.0

    def shutdown(self) -> None:
        try:
            self.stop()
        finally:
            self.kill()


class MasterSlaveBrokers:
    """A NameServer, a SYNC_MASTER and its SLAVE (`rmq namesrv`, `rmq broker -c` twice) on fixed
    ports: the drill kills and restarts the master while the slave keeps running. The slave is
    given the master's HA address (haMasterAddress), so it reconnects by itself after each restart."""

    def __init__(self, config_path: str | None, workdir: str, kafka: bool = True):
        self.workdir = workdir
        base = drill_broker_config(config_path)
        base.setdefault("brokerName", "broker-a")  # written out: the slave pairs with the master by this name
        ns_port, m_port, m_ha, s_port = free_port(), free_port(), free_port(), free_port()
        m_kafka = free_port() if kafka else 0
        ns = f"127.0.0.1:{ns_port}"
        common = {"namesrvAddr": ns, "brokerIP1": "127.0.0.1", "registerNameServerPeriod": 1000}
        self.data = os.path.abspath(os.path.join(workdir, "master", "store"))
        self.slave_data = os.path.abspath(os.path.join(workdir, "slave", "store"))
        master = {**base, **common, "brokerId": 0, "brokerRole": "SYNC_MASTER", "listenPort": m_port,
                  "haListenPort": m_ha, "storePathRootDir": self.data, "kafkaEnable": kafka, "kafkaPort": m_kafka}
        master.pop("haMasterAddress", None)
        slave = {**base, **common, "brokerId": 1, "brokerRole": "SLAVE", "listenPort": s_port,
                 "haMasterAddress": f"127.0.0.1:{m_ha}", "storePathRootDir": self.slave_data, "kafkaEnable": False,
                 "slaveSynchronizeInterval": 1000}
        slave.pop("haListenPort", None)
        self.config_path = _write_yaml(os.path.join(workdir, "drill-master.yaml"), master)
        self.slave_config_path = _write_yaml(os.path.join(workdir, "drill-slave.yaml"), slave)
        self.namesrv = ServerProcess("namesrv", ["namesrv", "--port", str(ns_port), "--host", "127.0.0.1"], workdir)
        self.master = ServerProcess("master", ["broker", "-c", self.config_path], workdir)
        self.slave = ServerProcess("slave", ["broker", "-c", self.slave_config_path], workdir)
        self.listeners = {"namesrv": ns, "remoting": f"127.0.0.1:{m_port}"}
        if kafka:
            self.listeners["kafka"] = f"127.0.0.1:{m_kafka}"
        self.slave_addr = f"127.0.0.1:{s_port}"

    @property
    def log_path(self) -> str:
        return self.master.log_path

    def start_all(self) -> None:
        self.namesrv.start()
        self.master.start()
        self.slave.start()
        if self.master.info.get("brokerAddr") != self.listeners["remoting"]:
            raise RuntimeError(f"the master registered as {self.master.info.get('brokerAddr')}, "
                               f"not {self.listeners['remoting']}; see {self.master.log_path}")

    def start(self, timeout: float = READY_TIMEOUT_S) -> float:
        return self.master.start(timeout)

    def kill(self) -> None:
        self.master.kill()

    def stop(self) -> None:
        self.master.stop()

    def shutdown(self) -> None:
        """Stop every process (SIGKILL what does not stop); the first error is raised after all are down."""
        first: Exception | None = None
        for p in (self.master, self.slave, self.namesrv):
            try:
                p.stop()
            except Exception as exc:  # noqa: BLE001 - the others must still go down
                first = first or exc
            finally:
                p.kill()
        if first is not None:
            raise first

    # ---------------------------------------------------------------- what the drill waits for
    def _runtime_info(self, addr: str) -> dict:
        from rmq.client.admin import MQAdmin
        with MQAdmin(self.listeners["namesrv"]) as admin:
            return admin.broker_runtime_info(addr)

    def wait_serves(self, topic: str) -> None:
        """The slave knows the topic (SlaveSynchronize copied the master's topic configs): it answers pulls."""
        from rmq.client.admin import MQAdmin
        from rmq.remoting import MessageQueue

        def serves() -> bool:
            with MQAdmin(self.listeners["namesrv"]) as admin:
                admin.pull(MessageQueue(topic, "", 0), 0, 1, broker_addr=self.slave_addr)  # TOPIC_NOT_EXIST until then
            return True
        wait_until(serves, SLAVE_CONNECT_TIMEOUT_S, f"the slave serving topic {topic} (see {self.slave.log_path})")

    def wait_replicating(self) -> float:
        """The master has a slave connection (a SYNC_MASTER answers SLAVE_NOT_AVAILABLE until then);
        returns the seconds waited."""
        t0 = time.monotonic()
        wait_until(lambda: int(self._runtime_info(self.listeners["remoting"]).get("haConnections", 0)) > 0,
                   SLAVE_CONNECT_TIMEOUT_S, f"the slave connecting to the master (see {self.slave.log_path})")
        return time.monotonic() - t0

    def wait_slave_settled(self) -> None:
        """After the master's kill: the slave's HA connection is closed (no more bytes can arrive) and
        its reput has dispatched everything its commitlog holds into consumequeues."""
        def settled() -> bool:
            info = self._runtime_info(self.slave_addr)
            return str(info.get("haMasterConnected")).lower() == "false" and int(info["dispatchBehindBytes"]) == 0
        wait_until(settled, SLAVE_SETTLE_TIMEOUT_S, f"the slave settling after the master's kill (see {self.slave.log_path})")

    def wait_caught_up(self) -> float:
        """The slave's commitlog ends where the master's does and is dispatched; returns the seconds waited."""
        t0 = time.monotonic()

        def caught_up() -> bool:
            m = self._runtime_info(self.listeners["remoting"])
            s = self._runtime_info(self.slave_addr)
            return int(s["commitLogMaxOffset"]) == int(m["commitLogMaxOffset"]) and int(s["dispatchBehindBytes"]) == 0
        wait_until(caught_up, CATCH_UP_TIMEOUT_S, f"the slave catching up with the master (see {self.slave.log_path})")
        return time.monotonic() - t0
