"""Tests of the OMB runner's starvation figures: run-queue wait per process and machine busy %."""
import os
import threading

from labs.omb import machine_busy_pct, machine_cpu, run_queue_seconds


def test_run_queue_seconds_reads_this_process_and_only_grows():
    stop = threading.Event()

    def spin() -> None:                 # a second runnable thread, competing with this one for the GIL
        while not stop.is_set():
            pass
    spinner = threading.Thread(target=spin, daemon=True)
    spinner.start()
    try:
        tids = sorted(os.listdir(f"/proc/{os.getpid()}/task"))
        readings = [run_queue_seconds(os.getpid()) for _ in range(50)]
        same_threads = tids == sorted(os.listdir(f"/proc/{os.getpid()}/task"))
    finally:
        stop.set()
        spinner.join(10)
    assert all(isinstance(r, float) and r >= 0 for r in readings), readings
    # a sum over the live threads: it only grows while the same threads live (one that ends takes its
    # share with it)
    if same_threads:
        assert readings == sorted(readings)


def test_run_queue_seconds_of_a_gone_process_is_none():
    assert run_queue_seconds(2 ** 22 + 12345) is None       # above the default pid_max: no such process


def test_machine_busy_pct_is_a_share_of_all_cpus():
    before = machine_cpu()
    assert before is not None and before[0] >= before[1] >= 0
    sum(range(2_000_000))                                    # some ticks pass
    after = machine_cpu()
    busy = machine_busy_pct(before, after)
    assert busy is None or 0.0 <= busy <= 100.0             # None only when no tick passed
    assert machine_busy_pct(None, after) is None and machine_busy_pct(after, after) is None
    assert machine_busy_pct((100, 50), (300, 100)) == 75.0
