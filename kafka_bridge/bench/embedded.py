"""An `rmq up` child process with a Kafka listener on a free port and a throw-away store, for the
Kafka benches that compare broker settings (kafka-commits, kafka-groups), and their "median [min-max]"
figure format."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile

import click

from ..peers import free_port, wait_port


class BenchBroker:
    """`rmq up` with the broker settings `conf` (written to its broker.yaml), its store in a temporary
    directory that stop() removes."""

    def __init__(self, name: str, conf: dict, *, start_timeout: float = 60):
        self.name = name
        self.conf = conf
        self.start_timeout = start_timeout
        self.tmp = tempfile.mkdtemp(prefix=f"bench-{name}-")
        self.proc: subprocess.Popen | None = None
        self.bootstrap = ""

    def start(self) -> str:
        port = free_port()
        cfg = os.path.join(self.tmp, "broker.yaml")
        with open(cfg, "w", encoding="utf-8") as fh:
            for k, v in {"consolePort": 0, **self.conf}.items():
                fh.write(f"{k}: {json.dumps(v)}\n")
        log = open(os.path.join(self.tmp, "broker.log"), "wb")
        cmd = [sys.executable, "-P", "-m", "rmq.cli", "up", "--config", cfg, "--data", os.path.join(self.tmp, "store"),
               "--kafka-port", str(port), "--namesrv-port", "0", "--remoting-port", "0"]
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=log, cwd=self.tmp,
                                     env=dict(os.environ, RMQ_LOG="WARNING"))
        log.close()
        if not wait_port("127.0.0.1", port, self.start_timeout, self.proc):
            tmp = self.tmp
            self.stop(keep=True)
            raise click.ClickException(f"rmq up ({self.name}) did not start for the bench (see its log in {tmp})")
        self.bootstrap = f"127.0.0.1:{port}"
        return self.bootstrap

    def stop(self, keep: bool = False) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        if not keep:
            shutil.rmtree(self.tmp, ignore_errors=True)


def fmt_median(vals: list[float], unit: str = "") -> str:
    """"median [min-max] unit" of some repeats (just the median when they agree)."""
    s = sorted(vals)
    med = s[len(s) // 2]
    tail = f" {unit}" if unit else ""
    if len(s) == 1 or s[0] == s[-1]:
        return f"{med:,.0f}{tail}"
    return f"{med:,.0f}{tail} [{s[0]:,.0f}-{s[-1]:,.0f}]"
