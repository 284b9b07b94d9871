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
