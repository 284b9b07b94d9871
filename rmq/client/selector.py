"""MessageQueueSelector for ordered sends (SPEC §3 "MessageQueueSelector for ordered sends"):
hash (Java hashCode of the argument, as SelectMessageQueueByHash), random and round-robin."""
from __future__ import annotations

import itertools
import random
from typing import Any, Callable, Protocol, Sequence, Union, runtime_checkable

from rmq.common.jhash import java_string_hash
from rmq.remoting import MessageQueue

__all__ = ["MessageQueueSelector", "SelectMessageQueueByHash", "SelectMessageQueueByRandom",
           "SelectMessageQueueByRoundRobin", "java_hash_code", "as_selector", "SelectorLike"]


@runtime_checkable
class MessageQueueSelector(Protocol):
    """Chooses the queue for a message: ``select(mqs, msg, arg) -> MessageQueue``."""

    def select(self, mqs: Sequence[MessageQueue], msg: Any, arg: Any) -> MessageQueue: ...


SelectorLike = Union[MessageQueueSelector, Callable[[Sequence[MessageQueue], Any, Any], MessageQueue]]


def _int32(v: int) -> int:
    v &= 0xFFFFFFFF
    return v - 0x100000000 if v & 0x80000000 else v


def java_hash_code(arg: Any) -> int:
    """What ``arg.hashCode()`` gives in Java for the matching boxed type: Integer for ints in
    int32 range, Long above it, String, Boolean; other objects fall back to Python's hash."""
    if isinstance(arg, bool):
        return 1231 if arg else 1237
    if isinstance(arg, int):
        if -(1 << 31) <= arg < (1 << 31):
            return arg
        v = arg & 0xFFFFFFFFFFFFFFFF
        return _int32(v ^ (v >> 32))
    if isinstance(arg, str):
        return java_string_hash(arg)
    return _int32(hash(arg))


class SelectMessageQueueByHash:
    """``abs(arg.hashCode() % mqs.size())`` — the same argument always lands on the same queue."""

    def select(self, mqs: Sequence[MessageQueue], msg: Any, arg: Any) -> MessageQueue:
        h = java_hash_code(arg)
        value = abs(h) % len(mqs)   # Java: h % n then abs; equal for any sign of h
        return mqs[value]


class SelectMessageQueueByRandom:
    """A uniformly random queue."""
    def __init__(self, rng: random.Random | None = None) -> None:
        self.rng = rng or random.Random()

    def select(self, mqs: Sequence[MessageQueue], msg: Any, arg: Any) -> MessageQueue:
        return mqs[self.rng.randrange(len(mqs))]


class SelectMessageQueueByRoundRobin:
    """Each call takes the next queue, ignoring ``arg``."""

    def __init__(self, start: int = 0) -> None:
        self._next = itertools.count(start)

    def select(self, mqs: Sequence[MessageQueue], msg: Any, arg: Any) -> MessageQueue:
        return mqs[next(self._next) % len(mqs)]


class _FunctionSelector:
    def __init__(self, fn: Callable[[Sequence[MessageQueue], Any, Any], MessageQueue]) -> None:
        self.fn = fn

    def select(self, mqs: Sequence[MessageQueue], msg: Any, arg: Any) -> MessageQueue:
        return self.fn(mqs, msg, arg)


def as_selector(selector: SelectorLike) -> MessageQueueSelector:
    """Accept a selector object or a plain ``fn(mqs, msg, arg)``."""
    if hasattr(selector, "select"):
        return selector  # type: ignore[return-value]
    if callable(selector):
        return _FunctionSelector(selector)
    raise TypeError("selector must have select(mqs, msg, arg) or be callable")
