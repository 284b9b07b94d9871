"""Loads rmq._native, the optional C speedups of the Kafka produce/fetch hot paths (rmq/_native.c).

`ext` is the extension module, or None when it is not built or RMQ_NO_NATIVE=1 is set; callers
then run the Python code, which is the reference behaviour. Read `native.ext` at call time so
tests can switch it off (monkeypatch `rmq.native.ext` to None).
"""
from __future__ import annotations

import os

DISABLED = os.environ.get("RMQ_NO_NATIVE", "").strip().lower() not in ("", "0", "false", "no")

ext = None
if not DISABLED:
    try:
        from . import _native as ext
    except ImportError:  # not built (no C compiler at install time): the Python code runs
        ext = None


def pwrite_all(fd: int, data, at: int) -> None:
    """All of `data` written at offset `at` of `fd`. With the extension, one rmq._native.pwrite_all
    call, which keeps the GIL for writes below 256 KiB (releasing it for a copy of a few
    microseconds handed it to the flush thread, and the writer waited for it back); else os.pwrite
    until everything is written, the GIL released while the kernel copies."""
    if ext is not None:
        ext.pwrite_all(fd, data, at)
        return
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, at)
        view, at = view[n:], at + n


def write_keep_gil(transport, fd: int, data) -> None:
    """Write `data` to an asyncio transport whose socket is `fd` (-1: unknown). While nothing is
    queued in the transport, it goes out with one non-blocking send that keeps the GIL
    (rmq._native.send_keep_gil): socket.send, which the transport calls, releases it, and the event
    loop then waited for another thread (flush, reput, consume) to hand it back. What the socket
    does not take, an error, or everything without the extension goes to the transport, which
    queues it or reports the lost connection as before; order is kept, as the direct send is only
    tried while the transport's buffer is empty."""
    if fd >= 0 and ext is not None and not transport.get_write_buffer_size() and not transport.is_closing():
        try:
            sent = ext.send_keep_gil(fd, data)
        except OSError:
            sent = 0  # the transport's own send meets the error and closes the connection
        if sent == len(data):
            return
        if sent:
            data = memoryview(data)[sent:]
    transport.write(data)
