"""The consumer offsets journal's file format (issue 27): config/consumerOffset.journal.<generation>,
one line per Kafka commit, ``crc32hex JSON``. The broker's ConsumerOffsetManager appends and
compacts it (rmq/broker/offsets.py); `rmq store inspect` reads it here to show what a broker killed
before its next persist of consumerOffset.json would replay. Plain files, no sockets."""
from __future__ import annotations

import glob
import json
import logging
import os
import zlib
from typing import Iterator

log = logging.getLogger("rmq.store")

FILE_PREFIX = "consumerOffset.journal."


def encode_line(entry: list) -> bytes:
    """[``topic@group``, queueId, offset] (a commit) or [topic] (the topic's offsets removed)."""
    payload = json.dumps(entry, separators=(",", ":"), ensure_ascii=True).encode()
    return b"%08x %s\n" % (zlib.crc32(payload), payload)


def parse_line(line: bytes) -> list | None:
    """The entry, or None when the CRC or the JSON does not hold."""
    crc, _, payload = line.partition(b" ")
    try:
        if int(crc, 16) != zlib.crc32(payload):
            return None
        entry = json.loads(payload)
    except ValueError:
        return None
    if isinstance(entry, list) and len(entry) == 3 and isinstance(entry[0], str) \
            and all(type(x) is int for x in entry[1:]):
        return entry
    if isinstance(entry, list) and len(entry) == 1 and isinstance(entry[0], str):
        return entry
    return None


def journal_path(config_dir: str, gen: int) -> str:
    return os.path.join(config_dir, f"{FILE_PREFIX}{gen}")


def journals(config_dir: str) -> list[tuple[int, str]]:
    """(generation, path) of every journal in the directory, oldest first."""
    out = []
    for path in glob.glob(os.path.join(glob.escape(config_dir), FILE_PREFIX + "*")):
        suffix = path.rsplit(".", 1)[1]
        if suffix.isdigit():
            out.append((int(suffix), path))
    return sorted(out)


def read_entries(path: str) -> Iterator[list]:
    """The entries of one journal in order; stops at a torn or corrupt line (logged, unless it is an
    unterminated last line)."""
    try:
        with open(path, "rb") as fh:
            lines = fh.read().split(b"\n")
    except OSError as exc:
        log.error("%s: unreadable (%s); its commits are lost", path, exc)
        return
    for i, line in enumerate(lines):
        entry = parse_line(line) if line else None
        if entry is None:
            if line or i != len(lines) - 1:
                log.warning("%s: line %d is torn or corrupt; the %d lines after it are skipped",
                            path, i + 1, len(lines) - i - 1)
            return
        yield entry


def apply(table: dict[str, dict[int, int]], entry: list) -> None:
    """One entry onto an offset table (``topic@group -> {queueId: offset}``)."""
    if len(entry) == 3:
        key, qid, off = entry
        table.setdefault(key, {})[qid] = off
    else:
        topic = entry[0]
        for key in [k for k in table if k.partition("@")[0] == topic]:
            del table[key]


def replay(config_dir: str, table: dict[str, dict[int, int]], covered: int) -> int:
    """Apply the journals newer than generation `covered` to `table`; how many entries were applied."""
    n = 0
    for gen, path in journals(config_dir):
        if gen > covered:
            for entry in read_entries(path):
                apply(table, entry)
                n += 1
    return n
