"""What the two Python data sources share (issue 12): option parsing, offset ranges, the batch and
streaming readers, and Arrow batches.

A source is a `Backend` (it lists partitions, answers watermarks and offsets by time, and reads one
offset range as Arrow batches on an executor) plus a schema. The planning around it is the same for
Kafka-protocol topics (kafka_source.py) and RocketMQ topics (rocketmq_source.py):

- a partition is `(topic, key)` where key is a string: "3" for Kafka partition 3, "broker-a:3" for
  RocketMQ queue 3 of broker-a;
- offsets given as options are "earliest", "latest" or JSON `{"topic": {"key": offset}}` with -2
  for earliest and -1 for latest, as Spark's Kafka source takes them;
- a batch query reads [start, end) of every partition, one Spark partition each (split further for
  minPartitions); a streaming query keeps `{"topic": {"key": next offset}}` as its offset, which
  Spark writes to the checkpoint, so a restarted query reads on from exactly where the last
  committed micro-batch ended.
"""
from __future__ import annotations

import json
import time
from typing import Any, Callable, Iterable, Iterator

from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition

EARLIEST, LATEST = -2, -1
TIMEOUT_S = 30.0
ARROW_BATCH_ROWS = 8192

Partition = tuple  # (topic: str, key: str)


class SourceError(ValueError):
    """Bad options, a missing topic or an unreachable broker: the message names the option or the cause."""


def opt(options, name: str, default=None):
    """An option by case-insensitive name (Spark lower-cases them on the way in)."""
    for k, v in options.items():
        if k.lower() == name.lower():
            return v
    return default


def opt_bool(options, name: str, default: bool) -> bool:
    v = opt(options, name)
    if v is None:
        return default
    if str(v).lower() not in ("true", "false"):
        raise SourceError(f"option {name}: expected true or false, got {v!r}")
    return str(v).lower() == "true"


def opt_int(options, name: str, default: int | None, minimum: int = 0) -> int | None:
    v = opt(options, name)
    if v is None or v == "":
        return default
    try:
        n = int(v)
    except ValueError:
        raise SourceError(f"option {name}: expected a whole number, got {v!r}") from None
    if n < minimum:
        raise SourceError(f"option {name}: expected at least {minimum}, got {n}")
    return n


def check_options(options, known: set[str], prefixes: tuple[str, ...], fmt: str, what: str) -> None:
    unknown = [k for k in options if k.lower() not in known and not k.lower().startswith(prefixes)]
    if unknown:
        raise SourceError(f"unknown option(s) {', '.join(sorted(unknown))} for format {fmt} ({what})")


def offsets_option(options, name: str, default: str, parts: list[Partition],
                   match: Callable[[str, str, list[Partition]], list[Partition]]) -> dict[Partition, int]:
    """Resolve startingOffsets / endingOffsets into {partition: offset or EARLIEST/LATEST}.

    `match(topic, key_given, parts)` says which partitions a JSON key names (a Kafka source takes
    the partition number; the RocketMQ source also takes a bare queue id for every broker)."""
    value = opt(options, name, default)
    if value in ("earliest", "latest"):
        if name == "endingOffsets" and value == "earliest":
            raise SourceError("option endingOffsets: earliest is not allowed (use latest or JSON)")
        return {tp: EARLIEST if value == "earliest" else LATEST for tp in parts}
    try:
        spec = json.loads(value)
        given = [(str(t), str(k), int(o)) for t, ks in spec.items() for k, o in ks.items()]
    except (ValueError, TypeError, AttributeError):
        raise SourceError(f"option {name}: expected earliest, latest or JSON like "
                          f"{{\"topic\": {{\"0\": 23, \"1\": -2}}}}, got {value!r}") from None
    out: dict[Partition, int] = {}
    for t, k, o in given:
        hit = match(t, k, parts)
        if not hit:
            raise SourceError(f"option {name}: {t}-{k} is not one of the partitions read")
        for tp in hit:
            out[tp] = o
    fill = EARLIEST if name == "startingOffsets" else LATEST
    return {tp: out.get(tp, fill) for tp in parts}


def timestamps_option(options, parts: list[Partition], match) -> dict[Partition, int] | None:
    ts_all, ts_by = opt(options, "startingTimestamp"), opt(options, "startingOffsetsByTimestamp")
    if ts_all is None and ts_by is None:
        return None
    try:
        if ts_all is not None:
            return {tp: int(ts_all) for tp in parts}
        out = {}
        for t, ks in json.loads(ts_by).items():
            for k, ms in ks.items():
                for tp in match(str(t), str(k), parts):
                    out[tp] = int(ms)
        return out
    except (ValueError, TypeError, AttributeError):
        raise SourceError("option startingTimestamp / startingOffsetsByTimestamp: expected epoch milliseconds "
                          "(or JSON of them per partition)") from None


class Backend:
    """One source's access to its broker, on the driver. Subclasses fill in the four methods."""

    fmt = "?"

    def __init__(self, options) -> None:
        self.options = options

    def partitions(self) -> list[Partition]:
        raise NotImplementedError

    def watermarks(self, parts: list[Partition]) -> dict[Partition, tuple[int, int]]:
        """{partition: (earliest offset, next offset to be written)}."""
        raise NotImplementedError

    def offsets_for_times(self, wanted: dict[Partition, int]) -> dict[Partition, int]:
        """{partition: first offset stored at or after the time} (-1 when there is none)."""
        raise NotImplementedError

    def match(self, topic: str, key: str, parts: list[Partition]) -> list[Partition]:
        return [tp for tp in parts if tp == (topic, key)]

    def range_value(self, tp: Partition, start: int, end: int) -> dict:
        """What an executor needs to read [start, end) of tp (plain data: it is pickled)."""
        raise NotImplementedError

    def commit(self, end: dict) -> None:
        """A streaming micro-batch ending at `end` is done (the RocketMQ source stores the offsets)."""

    def close(self) -> None:
        pass


class Range(InputPartition):
    """One offset range to read; everything lives in `value`, the field Spark carries to executors."""

    def __init__(self, value: dict) -> None:
        super().__init__(value)


def split_for_min_partitions(ranges: list[tuple[Partition, int, int]], want: int) -> list[tuple[Partition, int, int]]:
    ranges = list(ranges)
    while want > len(ranges) and any(e - s > 1 for _, s, e in ranges):   # halve the widest range
        i = max(range(len(ranges)), key=lambda k: ranges[k][2] - ranges[k][1])
        tp, s, e = ranges[i]
        mid = s + (e - s) // 2
        ranges[i:i + 1] = [(tp, s, mid), (tp, mid, e)]
    return ranges


def resolve_start(tp: Partition, start: int, lo: int, hi: int, fail_on_loss: bool) -> int:
    start = lo if start == EARLIEST else hi if start == LATEST or start < -2 else start
    if start < lo:
        if fail_on_loss:
            raise SourceError(f"{tp[0]}-{tp[1]}: starting offset {start} is before the earliest available "
                              f"offset {lo} (records were deleted); set failOnDataLoss=false to start at the "
                              "earliest")
        start = lo
    return start


def batch_plan(backend: Backend) -> list[Range]:
    """Offset ranges of a batch query: startingOffsets (or a starting time) up to endingOffsets."""
    options = backend.options
    try:
        parts = backend.partitions()
        fail_on_loss = opt_bool(options, "failOnDataLoss", True)
        start_spec = offsets_option(options, "startingOffsets", "earliest", parts, backend.match)
        end_spec = offsets_option(options, "endingOffsets", "latest", parts, backend.match)
        by_time = timestamps_option(options, parts, backend.match)
        if by_time is not None:
            start_spec.update({tp: (o if o >= 0 else LATEST)
                               for tp, o in backend.offsets_for_times(by_time).items()})
        marks = backend.watermarks(parts)
        ranges = []
        for tp in parts:
            lo, hi = marks[tp]
            start = resolve_start(tp, start_spec[tp], lo, hi, fail_on_loss)
            end = hi if end_spec[tp] == LATEST else end_spec[tp]
            if end > hi:
                if fail_on_loss:
                    raise SourceError(f"{tp[0]}-{tp[1]}: ending offset {end} is beyond the latest offset {hi}")
                end = hi
            if end > start:
                ranges.append((tp, start, end))
    finally:
        backend.close()
    want = opt_int(options, "minPartitions", 0) or 0
    return [Range(backend.range_value(tp, s, e)) for tp, s, e in split_for_min_partitions(ranges, want)]


class BatchReader(DataSourceReader):
    def __init__(self, make_backend: Callable[[], Backend], read: Callable[[dict], Iterator]) -> None:
        self.make_backend, self.read_value = make_backend, read

    def partitions(self):
        return batch_plan(self.make_backend())

    def read(self, partition):
        if not isinstance(getattr(partition, "value", None), dict):
            return iter(())     # Spark reads one empty partition when planning found nothing
        return self.read_value(partition.value)


def _as_offsets(d: dict[Partition, int]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for (t, k), o in sorted(d.items()):
        out.setdefault(t, {})[k] = int(o)
    return out


def _from_offsets(d: dict) -> dict[Partition, int]:
    try:
        return {(str(t), str(k)): int(o) for t, ks in d.items() for k, o in ks.items()}
    except (AttributeError, TypeError, ValueError):
        raise SourceError(f"the checkpoint holds an offset this source cannot read: {d!r} (expected "
                          "{\"topic\": {\"partition\": offset}}); start the query with a new checkpointLocation") from None


class StreamReader(DataSourceStreamReader):
    """A micro-batch stream over the backend's partitions.

    The offset is {"topic": {"partition": next offset}}. The first batch starts at startingOffsets
    (default latest, as in Spark) or a starting time; partitions that appear later (a subscribePattern
    matching a new topic, added partitions) start at their earliest. maxOffsetsPerTrigger caps a
    batch, shared among partitions in proportion to their backlog."""

    def __init__(self, make_backend: Callable[[], Backend], read: Callable[[dict], Iterator]) -> None:
        self.make_backend, self.read_value = make_backend, read
        self._backend: Backend | None = make_backend()
        self.options = self._backend.options
        self.fail_on_loss = opt_bool(self.options, "failOnDataLoss", True)
        self.max_per_trigger = opt_int(self.options, "maxOffsetsPerTrigger", None, minimum=1)
        self.min_partitions = opt_int(self.options, "minPartitions", 0) or 0
        self._latest: dict | None = None
        self._stored: dict | None = None

    @property
    def backend(self) -> Backend:
        if self._backend is None:
            self._backend = self.make_backend()
        return self._backend

    def __getstate__(self):       # the reader goes to the executors for read(): without live clients
        state = dict(self.__dict__)
        state["_backend"] = None
        return state

    def initialOffset(self) -> dict:
        parts = self.backend.partitions()
        spec = offsets_option(self.options, "startingOffsets", "latest", parts, self.backend.match)
        by_time = timestamps_option(self.options, parts, self.backend.match)
        if by_time is not None:
            spec.update({tp: (o if o >= 0 else LATEST) for tp, o in self.backend.offsets_for_times(by_time).items()})
        marks = self.backend.watermarks(parts)
        return _as_offsets({tp: resolve_start(tp, spec[tp], *marks[tp], self.fail_on_loss) for tp in parts})

    def getDefaultReadLimit(self):
        from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows
        return ReadMaxRows(self.max_per_trigger) if self.max_per_trigger else ReadAllAvailable()

    def latestOffset(self, start: dict, limit) -> dict:
        from pyspark.sql.streaming.datasource import ReadMaxRows
        begin = _from_offsets(start)
        if start != self._stored:
            # Spark plans a batch only once the one before it is in the sink, so `start` is done with:
            # storing it here keeps the group's offsets current even when no further batch follows
            # (Spark calls commit() for a batch only when it plans the next one).
            self.backend.commit(start)
            self._stored = start
        parts = self.backend.partitions()
        marks = self.backend.watermarks(parts)
        self._latest = _as_offsets({tp: marks[tp][1] for tp in parts})
        frm = {}
        for tp in parts:
            lo, hi = marks[tp]
            at = begin.get(tp, lo)                  # a partition new since the last batch starts at earliest
            if at < lo:
                if self.fail_on_loss:
                    raise SourceError(f"{tp[0]}-{tp[1]}: offset {at} is no longer available (the earliest is "
                                      f"{lo}; records were deleted); set failOnDataLoss=false to skip them")
                at = lo
            frm[tp] = at
        for tp, o in begin.items():             # a partition that went away keeps its offset
            frm.setdefault(tp, o)
        end = {tp: max(frm[tp], marks[tp][1]) if tp in marks else frm[tp] for tp in frm}
        if isinstance(limit, ReadMaxRows):
            backlog = {tp: end[tp] - frm[tp] for tp in frm}
            total = sum(backlog.values())
            if total > limit.max_rows:
                budget = limit.max_rows
                share = {tp: backlog[tp] * budget // total for tp in frm}
                left = budget - sum(share.values())
                for tp in sorted(frm, key=lambda tp: backlog[tp] - share[tp], reverse=True):
                    if left <= 0:
                        break
                    if share[tp] < backlog[tp]:
                        share[tp] += 1
                        left -= 1
                end = {tp: frm[tp] + share[tp] for tp in frm}
        return _as_offsets(end)

    def reportLatestOffset(self):
        return self._latest

    def partitions(self, start: dict, end: dict):
        begin, stop = _from_offsets(start), _from_offsets(end)
        marks = None
        ranges = []
        for tp, e in sorted(stop.items()):
            s = begin.get(tp)
            if s is None:                             # first seen in this batch: from its earliest
                marks = marks or self.backend.watermarks(list(stop))
                s = marks[tp][0]
            if e > s:
                ranges.append((tp, s, e))
        ranges = split_for_min_partitions(ranges, self.min_partitions)
        return [Range(self.backend.range_value(tp, s, e)) for tp, s, e in ranges]

    def read(self, partition):
        return self.read_value(partition.value)

    def commit(self, end: dict) -> None:
        if end != self._stored:
            self.backend.commit(end)
            self._stored = end

    def stop(self) -> None:
        if self._backend is not None:
            self._backend.close()


def arrow_batches(schema, rows: Iterable[tuple], size: int = ARROW_BATCH_ROWS) -> Iterator[Any]:
    """Rows (tuples in schema order) as pyarrow RecordBatches of `size` rows."""
    import pyarrow as pa
    cols: list[list] = [[] for _ in schema]
    n = 0
    for row in rows:
        for c, v in zip(cols, row):
            c.append(v)
        n += 1
        if n == size:
            yield pa.RecordBatch.from_arrays([pa.array(c, type=f.type) for c, f in zip(cols, schema)], schema=schema)
            cols, n = [[] for _ in schema], 0
    if n:
        yield pa.RecordBatch.from_arrays([pa.array(c, type=f.type) for c, f in zip(cols, schema)], schema=schema)


def wait_or_fail(deadline: float, what: str) -> None:
    if time.monotonic() > deadline:
        raise SourceError(what)
