"""The background event-loop thread behind the synchronous client facade (SPEC §3-§4): blocking
calls such as ``Producer.send`` run the async implementation on this loop and wait."""
from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from typing import Any, Coroutine, TypeVar

T = TypeVar("T")
log = logging.getLogger("rmq.client")

__all__ = ["BlockingFacade", "LoopThread"]


class LoopThread:
    """A shared, reference-counted asyncio loop running in a daemon thread.

    ``LoopThread.acquire()`` returns the process-wide instance (starting it if needed);
    every ``acquire`` is paired with a ``release``; the thread stops with the last release.
    """

    _lock = threading.Lock()
    _shared: "LoopThread | None" = None

    def __init__(self, name: str = "rmq-client-loop") -> None:
        self.loop = asyncio.new_event_loop()
        self._refs = 0
        self._ready = threading.Event()
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()
        self._ready.wait()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(self._ready.set)
        try:
            self.loop.run_forever()
        finally:
            try:
                pending = [t for t in asyncio.all_tasks(self.loop) if not t.done()]
                for t in pending:
                    t.cancel()
                if pending:
                    self.loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
                self.loop.run_until_complete(self.loop.shutdown_asyncgens())
            finally:
                self.loop.close()

    @classmethod
    def acquire(cls) -> "LoopThread":
        with cls._lock:
            lt = cls._shared
            if lt is None or not lt.thread.is_alive():
                lt = cls._shared = LoopThread()
            lt._refs += 1
            return lt

    def release(self) -> None:
        with LoopThread._lock:
            self._refs -= 1
            if self._refs > 0:
                return
            if LoopThread._shared is self:
                LoopThread._shared = None
        self.stop()

    def stop(self, timeout: float = 5.0) -> None:
        if self.thread.is_alive():
            self.loop.call_soon_threadsafe(self.loop.stop)
            if threading.current_thread() is not self.thread:
                self.thread.join(timeout)

    @property
    def in_loop_thread(self) -> bool:
        return threading.current_thread() is self.thread

    def submit(self, coro: Coroutine[Any, Any, T]) -> "concurrent.futures.Future[T]":
        """Schedule ``coro`` on the loop; returns a concurrent Future."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coro`` on the loop and block until it finishes (not from the loop thread)."""
        if self.in_loop_thread:
            coro.close()
            raise RuntimeError("blocking client call made from the client's own event loop thread; "
                               "use the async API (Async* classes) there")
        fut = self.submit(coro)
        try:
            return fut.result(timeout)
        except concurrent.futures.TimeoutError:
            fut.cancel()
            raise

    def call_soon(self, fn: Any, *args: Any) -> None:
        """Schedule a plain callback on the loop from any thread."""
        self.loop.call_soon_threadsafe(fn, *args)


class BlockingFacade:
    """The blocking lifecycle shared by Producer, PullConsumer and PushConsumer: the async
    implementation (``self._impl``) runs on the shared LoopThread between start() and shutdown()."""

    _shutdown_timeout = 15.0

    def start(self):
        if self._lt is None:
            self._lt = LoopThread.acquire()
            try:
                self._lt.run(self._impl.start())
            except BaseException:
                self._lt.release()
                self._lt = None
                raise
        return self

    def shutdown(self) -> None:
        lt, self._lt = self._lt, None
        if lt is None:
            return
        try:
            lt.run(self._impl.shutdown(), timeout=self._shutdown_timeout)
        finally:
            lt.release()
            self._after_shutdown()

    def _after_shutdown(self) -> None:
        """Release what the facade itself holds (e.g. a callback pool); nothing by default."""

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()
