"""`rmq bench console`: what a live-updating web console costs the broker (issue 25). One `rmq up`
with its console on; the same send load (this package's Producer, sync sends from a few threads)
runs with the console closed and open, interleaved, repeated; it prints msgs/s per phase, the
median and spread of each condition, their ratio, and a verdict that calls a difference inside the
spread inconclusive.

"Open" is what a user with the console in a browser tab makes the broker do: `--viewers`
server-sent-event streams (/events, one JSON snapshot a second each), and one page load of the
store page and one /metrics scrape per second (a Prometheus scraping at 1 s, far above the usual 15 s).
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request

import click

from .client import _py_send_worker

READY_TIMEOUT = 60.0


def _start_broker(workdir: str) -> tuple[subprocess.Popen, dict]:
    ready = os.path.join(workdir, "ready.json")
    log = open(os.path.join(workdir, "broker.log"), "wb")
    cmd = [sys.executable, "-m", "rmq.cli", "up", "--data", os.path.join(workdir, "data"), "--namesrv-port", "0",
           "--remoting-port", "0", "--kafka-port", "0", "--console-port", "-1", "--ready-file", ready]
    proc = subprocess.Popen(cmd, cwd=workdir, stdout=log, stderr=subprocess.STDOUT)
    log.close()
    deadline = time.monotonic() + READY_TIMEOUT
    while time.monotonic() < deadline:
        if os.path.exists(ready):
            with open(ready, encoding="utf-8") as fh:
                return proc, json.load(fh)
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    proc.kill()
    proc.wait(10)
    raise click.ClickException(f"rmq up did not start within {READY_TIMEOUT:.0f} s (log: {workdir}/broker.log)")


def _create_topic(base: str, topic: str, namesrv: str) -> None:
    """Creates the topic through the console's form (4 queues) and waits until the NameServer routes it."""
    from rmq.client.admin import MQAdmin
    data = urllib.parse.urlencode({"topic": topic, "writeQueueNums": 4, "readQueueNums": 4, "perm": 6}).encode()
    with urllib.request.urlopen(urllib.request.Request(base + "/topics", data=data), timeout=30) as r:
        r.read()
    with MQAdmin(namesrv) as admin:
        admin.wait_for_route(topic, queues=4, timeout=30.0)


class Viewers:
    """The open console: SSE readers plus a once-a-second page load and scrape, on threads."""

    def __init__(self, base: str, topic: str, n_streams: int):
        self.base, self.topic, self.n = base, topic, n_streams
        self.stop = threading.Event()
        self.threads: list[threading.Thread] = []
        self.events = 0
        self.pages = 0
        self.errors: list[str] = []

    def _stream(self) -> None:
        try:
            with urllib.request.urlopen(self.base + "/events", timeout=10) as r:
                while not self.stop.is_set():
                    line = r.readline()
                    if not line:
                        break
                    if line.startswith(b"data: "):
                        self.events += 1
        except OSError as exc:
            if not self.stop.is_set():
                self.errors.append(f"events: {exc}")

    def _pages(self) -> None:
        urls = [f"{self.base}/store?topic={self.topic}&queue=0", f"{self.base}/metrics"]
        while not self.stop.wait(1.0):
            for u in urls:
                try:
                    with urllib.request.urlopen(u, timeout=30) as r:
                        r.read()
                    self.pages += 1
                except OSError as exc:
                    self.errors.append(f"{u}: {exc}")

    def __enter__(self):
        for i in range(self.n):
            self.threads.append(threading.Thread(target=self._stream, name=f"console-viewer-{i}", daemon=True))
        self.threads.append(threading.Thread(target=self._pages, name="console-pages", daemon=True))
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for t in self.threads:
            t.join(timeout=12)


def _spread(xs: list[float]) -> str:
    return f"{statistics.median(xs):,.0f} [{min(xs):,.0f}-{max(xs):,.0f}]"


@click.command("console")
@click.option("--count", type=click.IntRange(100, 10_000_000), default=5000, show_default=True,
              help="Messages sent per phase.")
@click.option("--size", type=click.IntRange(1, 4 * 1024 * 1024 - 1024), default=256, show_default=True,
              help="Body size in bytes.")
@click.option("--threads", type=click.IntRange(1, 64), default=4, show_default=True, help="Sending threads.")
@click.option("--repeats", type=click.IntRange(1, 50), default=3, show_default=True,
              help="Phases per condition (closed and open alternate, the order flipping each repeat).")
@click.option("--viewers", type=click.IntRange(1, 64), default=2, show_default=True,
              help="Server-sent-event streams while the console is open.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def bench_console(count, size, threads, repeats, viewers, as_json) -> None:
    """Broker put throughput with a live-updating console open vs closed, in the same run."""
    with tempfile.TemporaryDirectory(prefix="rmq-bench-console-") as workdir:
        proc, listeners = _start_broker(workdir)
        base = "http://" + listeners["console"]
        topic = "BenchConsole"
        runs: dict[str, list[float]] = {"closed": [], "open": []}
        extra: dict[str, int] = {"events": 0, "pages": 0}
        try:
            _create_topic(base, topic, listeners["namesrv"])
            _py_send_worker(listeners["namesrv"], topic, min(count, 500), size, 1, 1, 0)  # warm-up
            for r in range(repeats):
                order = ("closed", "open") if r % 2 == 0 else ("open", "closed")
                for cond in order:
                    if cond == "open":
                        with Viewers(base, topic, viewers) as v:
                            time.sleep(1.2)  # the streams are connected and a page load has happened
                            res = _py_send_worker(listeners["namesrv"], topic, count, size, threads, 1, 0)
                        extra["events"] += v.events
                        extra["pages"] += v.pages
                        if v.errors:
                            raise click.ClickException(f"the console failed while open: {v.errors[0]}")
                    else:
                        res = _py_send_worker(listeners["namesrv"], topic, count, size, threads, 1, 0)
                    if res["errors"]:
                        raise click.ClickException(f"sends failed: {res['errors'][0]}")
                    rate = count / res["wall"]
                    runs[cond].append(rate)
                    if not as_json:
                        click.echo(f"repeat {r + 1} console {cond:<6}: {rate:,.0f} msgs/s "
                                   f"({count} x {size} B, {threads} threads)", err=True)
        finally:
            proc.terminate()
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
    closed, opened = runs["closed"], runs["open"]
    ratio = statistics.median(opened) / statistics.median(closed)
    overlap = min(opened) <= max(closed) and min(closed) <= max(opened)
    if overlap:
        verdict = (f"inconclusive: the open console's median is {ratio:.2f}x the closed one's, inside the spread "
                   "of the repeats")
    else:
        verdict = f"the open console's median throughput is {ratio:.2f}x the closed one's (ranges do not overlap)"
    out = {"count": count, "size": size, "threads": threads, "repeats": repeats, "viewers": viewers,
           "closed_msgs_per_s": closed, "open_msgs_per_s": opened, "ratio_open_to_closed": round(ratio, 3),
           "sse_events_received": extra["events"], "pages_loaded": extra["pages"], "verdict": verdict}
    if as_json:
        click.echo(json.dumps(out, indent=1))
        return
    click.echo(f"console closed : {_spread(closed)} msgs/s (median [min-max] of {repeats})")
    click.echo(f"console open   : {_spread(opened)} msgs/s ({viewers} event streams, {extra['events']} "
               f"snapshots received, {extra['pages']} page loads/scrapes)")
    click.echo(f"open / closed  : {ratio:.2f}")
    click.echo(f"verdict        : {verdict}")
