"""A tolerant reader for fastjson bodies whose map keys are objects (TopicStatsTable,
ConsumeStats, OffsetSerializeWrapper write ``{{"brokerName":"b","queueId":0,"topic":"t"}:{...}}``),
used by the admin client (SPEC §10 "lag must be visible per queue and group").

Object keys come back as ``FrozenObject`` (a hashable, read-only mapping); bare numeric keys
as their text; everything else as in ``json``.  Standard JSON parses unchanged."""
from __future__ import annotations

import json
import re
from typing import Any

from rmq.remoting import BodyDecodeError, MessageQueue

__all__ = ["loads", "FrozenObject", "to_message_queue"]

_WS = re.compile(r"[ \t\r\n]*")
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_BARE = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*")
_decoder = json.JSONDecoder()
_MAX_DEPTH = 200


class FrozenObject(tuple):
    """An object used as a map key: a sorted tuple of (key, value) pairs with dict-like reads."""

    def get(self, key: str, default: Any = None) -> Any:
        for k, v in self:
            if k == key:
                return v
        return default

    def as_dict(self) -> dict:
        return dict(self)


def _freeze(v: Any) -> Any:
    if isinstance(v, dict):
        return FrozenObject(sorted((k if isinstance(k, str) else str(k), _freeze(x)) for k, x in v.items()))
    if isinstance(v, list):
        return tuple(_freeze(x) for x in v)
    return v


class _Parser:
    def __init__(self, text: str) -> None:
        self.s = text
        self.i = 0

    def ws(self) -> None:
        self.i = _WS.match(self.s, self.i).end()

    def error(self, msg: str) -> BodyDecodeError:
        return BodyDecodeError(f"fastjson body: {msg} at character {self.i}")

    def value(self, depth: int = 0) -> Any:
        if depth > _MAX_DEPTH:
            raise self.error("nested too deeply")
        self.ws()
        if self.i >= len(self.s):
            raise self.error("unexpected end")
        c = self.s[self.i]
        if c == "{":
            return self.obj(depth)
        if c == "[":
            return self.arr(depth)
        if c == '"':
            try:
                v, end = _decoder.raw_decode(self.s, self.i)
            except ValueError as exc:
                raise self.error(f"bad string ({exc})") from None
            self.i = end
            return v
        m = _NUMBER.match(self.s, self.i)
        if m:
            self.i = m.end()
            t = m.group(0)
            return float(t) if any(ch in t for ch in ".eE") else int(t)
        m = _BARE.match(self.s, self.i)
        if m:
            self.i = m.end()
            word = m.group(0)
            if word == "true":
                return True
            if word == "false":
                return False
            if word == "null":
                return None
            raise self.error(f"unexpected word {word!r}")
        raise self.error(f"unexpected character {c!r}")

    def obj(self, depth: int) -> dict:
        self.i += 1
        out: dict = {}
        self.ws()
        if self.s.startswith("}", self.i):
            self.i += 1
            return out
        while True:
            self.ws()
            if self.s.startswith("{", self.i) or self.s.startswith("[", self.i):
                key: Any = _freeze(self.value(depth + 1))
            elif self.s.startswith('"', self.i):
                key = self.value(depth + 1)
            else:
                m = _NUMBER.match(self.s, self.i) or _BARE.match(self.s, self.i)
                if not m:
                    raise self.error("expected an object key")
                key = m.group(0)
                self.i = m.end()
            self.ws()
            if not self.s.startswith(":", self.i):
                raise self.error("expected ':'")
            self.i += 1
            out[key] = self.value(depth + 1)
            self.ws()
            if self.s.startswith(",", self.i):
                self.i += 1
                continue
            if self.s.startswith("}", self.i):
                self.i += 1
                return out
            raise self.error("expected ',' or '}'")

    def arr(self, depth: int) -> list:
        self.i += 1
        out: list = []
        self.ws()
        if self.s.startswith("]", self.i):
            self.i += 1
            return out
        while True:
            out.append(self.value(depth + 1))
            self.ws()
            if self.s.startswith(",", self.i):
                self.i += 1
                continue
            if self.s.startswith("]", self.i):
                self.i += 1
                return out
            raise self.error("expected ',' or ']'")


def loads(data: bytes | str) -> Any:
    """Parse standard JSON or fastjson output with object / bare keys."""
    text = data.decode("utf-8", errors="replace") if isinstance(data, (bytes, bytearray, memoryview)) else data
    text = text.rstrip(" \t\r\n\x00")
    try:
        return json.loads(text)
    except ValueError:
        pass
    p = _Parser(text)
    v = p.value()
    p.ws()
    if p.i != len(p.s):
        raise p.error("trailing characters")
    return v


def to_message_queue(key: Any) -> MessageQueue | None:
    """A MessageQueue from an object key, a dict, or a key string that holds JSON or
    Java's ``MessageQueue [topic=T, brokerName=B, queueId=N]``."""
    if isinstance(key, str):
        k = key.strip()
        if k.startswith("{"):
            try:
                key = loads(k)
            except BodyDecodeError:
                return None
        elif k.startswith("MessageQueue ["):
            m = re.fullmatch(r"MessageQueue \[topic=(.*), brokerName=(.*), queueId=(-?\d+)\]", k)
            return MessageQueue(m.group(1), m.group(2), int(m.group(3))) if m else None
        else:
            return None
    get = getattr(key, "get", None)
    if get is None:
        return None
    topic, broker, qid = get("topic"), get("brokerName"), get("queueId")
    if topic is None or broker is None or qid is None:
        return None
    try:
        return MessageQueue(str(topic), str(broker), int(qid))
    except (TypeError, ValueError):
        return None
