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
import logging
import time
from typing import Any, Callable, Iterable, Iterator

from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow

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


def _describe(parts: list[Partition]) -> str:
    return ", ".join(f"{t}-{k}" for t, k in parts[:6]) + (" ..." if len(parts) > 6 else "")


def _json_offsets(options, name: str, value: str, parts: list[Partition], match, what: str) -> dict[Partition, int]:
    """JSON {"topic": {"partition": number}} naming every partition read, as Spark's Kafka source
    requires ("you must specify all TopicPartitions")."""
    try:
        spec = json.loads(value)
        given = [(str(t), str(k), int(o)) for t, ks in spec.items() for k, o in ks.items()]
    except (ValueError, TypeError, AttributeError):
        raise SourceError(f"option {name}: expected {what} or JSON like "
                          f"{{\"topic\": {{\"0\": 23, \"1\": -2}}}}, got {value!r}") from None
    out: dict[Partition, int] = {}
    for t, k, o in given:
        hit = match(t, k, parts)
        if not hit:
            raise SourceError(f"option {name}: {t}-{k} is not one of the partitions read ({_describe(parts)})")
        for tp in hit:
            out[tp] = o
    missing = [tp for tp in parts if tp not in out]
    if missing:
        raise SourceError(f"option {name}: the JSON must name every partition read, as in Spark's Kafka source "
                          f"(use -2 for earliest, -1 for latest); missing {_describe(missing)}")
    return out


def offsets_option(options, name: str, default: str, parts: list[Partition],
                   match: Callable[[str, str, list[Partition]], list[Partition]], batch: bool = True) -> dict[Partition, int]:
    """Resolve startingOffsets / endingOffsets into {partition: offset or EARLIEST/LATEST}, with Spark's
    Kafka source's rules: a batch query cannot start at latest nor end at earliest (by word or by -1/-2
    in the JSON), and JSON names every partition.

    `match(topic, key_given, parts)` says which partitions a JSON key names (a Kafka source takes
    the partition number; the RocketMQ source also takes a bare queue id for every broker)."""
    value = opt(options, name, default)
    starting = name == "startingOffsets"
    if value in ("earliest", "latest"):
        if not starting and value == "earliest":
            raise SourceError("option endingOffsets: earliest is not allowed (Spark's Kafka source: ending offset "
                              "can't be earliest for batch queries); use latest or JSON")
        if starting and batch and value == "latest":
            raise SourceError("option startingOffsets: latest is not allowed for a batch query (Spark's Kafka "
                              "source: starting offset can't be latest for batch queries); use earliest or JSON")
        return {tp: EARLIEST if value == "earliest" else LATEST for tp in parts}
    out = _json_offsets(options, name, value, parts, match, "earliest, latest")
    for tp, o in out.items():
        if starting and batch and o == LATEST:
            raise SourceError(f"option startingOffsets: {tp[0]}-{tp[1]} is -1 (latest), which a batch query "
                              "cannot start at")
        if not starting and o == EARLIEST:
            raise SourceError(f"option endingOffsets: {tp[0]}-{tp[1]} is -2 (earliest), which a batch query "
                              "cannot end at")
        if o < -2:
            raise SourceError(f"option {name}: {tp[0]}-{tp[1]} is {o}; expected an offset >= 0, -1 (latest) "
                              "or -2 (earliest)")
    return out


TIMESTAMP_OPTIONS = {"starting": ("startingTimestamp", "startingOffsetsByTimestamp"),
                     "ending": ("endingTimestamp", "endingOffsetsByTimestamp")}


def timestamps_option(options, parts: list[Partition], match, which: str = "starting") -> dict[Partition, int] | None:
    """{partition: epoch ms} from startingTimestamp (or endingTimestamp), which wins, else from
    startingOffsetsByTimestamp (endingOffsetsByTimestamp) JSON naming every partition; None when neither is set."""
    one, by = TIMESTAMP_OPTIONS[which]
    ts_all, ts_by = opt(options, one), opt(options, by)
    if ts_all is None and ts_by is None:
        return None
    if ts_all is not None:
        try:
            ms = int(ts_all)
        except ValueError:
            raise SourceError(f"option {one}: expected epoch milliseconds, got {ts_all!r}") from None
        return {tp: ms for tp in parts}
    out = _json_offsets(options, by, ts_by, parts, match, "epoch milliseconds per partition, as")
    return out


def timestamp_strategy(options) -> str:
    v = (opt(options, "startingOffsetsByTimestampStrategy") or "error").lower()
    if v not in ("error", "latest"):
        raise SourceError(f"option startingOffsetsByTimestampStrategy: expected error or latest, got {v!r}")
    return v


def offsets_by_time(backend: "Backend", wanted: dict[Partition, int], which: str) -> dict[Partition, int]:
    """The first offset at or after each time. A starting time after the last record is an error (Spark's
    default startingOffsetsByTimestampStrategy=error), or latest with the strategy latest; an ending time
    after the last record is latest, as in Spark's connector."""
    strategy = timestamp_strategy(backend.options)
    marks = backend.watermarks(list(wanted))
    out = {}
    for tp, o in backend.offsets_for_times(wanted).items():
        if o < 0 or o >= marks[tp][1]:      # no record at or after the time (some brokers answer the end)
            if which == "ending":           # Spark's connector: an ending time with no record after it is latest
                o = LATEST
            elif strategy == "error":
                raise SourceError(f"option {TIMESTAMP_OPTIONS[which][0]}: no offset of {tp[0]}-{tp[1]} is at or after "
                                  f"timestamp {wanted[tp]} (Spark's Kafka source: no offset matched); set "
                                  "startingOffsetsByTimestampStrategy=latest to start at the latest offset instead")
            o = LATEST
        out[tp] = o
    return out


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


def split_ranges(ranges: list[tuple[Partition, int, int]], want: int,
                 max_records: int | None = None) -> list[tuple[Partition, int, int]]:
    """Spark's KafkaOffsetRangeCalculator: ranges over maxRecordsPerPartition split into equal parts
    first, then the widest halved until there are minPartitions."""
    ranges = list(ranges)
    if max_records:
        out = []
        for tp, s, e in ranges:
            n = -(-(e - s) // max_records)
            bounds = [s + (e - s) * i // n for i in range(n + 1)] if n > 1 else [s, e]
            out.extend((tp, bounds[i], bounds[i + 1]) for i in range(len(bounds) - 1))
        ranges = out
    while want > len(ranges) and any(e - s > 1 for _, s, e in ranges):   # halve the widest range
        i = max(range(len(ranges)), key=lambda k: ranges[k][2] - ranges[k][1])
        tp, s, e = ranges[i]
        mid = s + (e - s) // 2
        ranges[i:i + 1] = [(tp, s, mid), (tp, mid, e)]
    return ranges


split_for_min_partitions = split_ranges


def resolve_start(tp: Partition, start: int, lo: int, hi: int, fail_on_loss: bool) -> int:
    start = lo if start == EARLIEST else hi if start == LATEST or start < -2 else start
    if start < lo:
        if fail_on_loss:
            raise SourceError(f"{tp[0]}-{tp[1]}: starting offset {start} is before the earliest available "
                              f"offset {lo} (records were deleted); set failOnDataLoss=false to start at the "
                              "earliest")
        start = lo
    return start


def split_options(options) -> tuple[int, int | None]:
    want = opt_int(options, "minPartitions", None, minimum=1)
    max_records = opt_int(options, "maxRecordsPerPartition", None, minimum=1)
    return want or 0, max_records


BATCH_ONLY = ("endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp")
STREAM_ONLY = ("maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay")


def batch_plan(backend: Backend) -> list[Range]:
    """Offset ranges of a batch query: startingOffsets (or a starting time) up to endingOffsets (or an
    ending time), with the errors Spark's Kafka source raises at the edges."""
    options = backend.options
    try:
        for name in STREAM_ONLY:       # Spark's connector logs that it ignores them in a batch query
            if opt(options, name) is not None:
                logging.getLogger(__name__).warning("%s option ignored in batch queries", name)
        want, max_records = split_options(options)
        fail_on_loss = opt_bool(options, "failOnDataLoss", True)
        timestamp_strategy(options)
        parts = backend.partitions()
        start_spec = offsets_option(options, "startingOffsets", "earliest", parts, backend.match)
        end_spec = offsets_option(options, "endingOffsets", "latest", parts, backend.match)
        by_time = timestamps_option(options, parts, backend.match, "starting")
        if by_time is not None:
            start_spec = offsets_by_time(backend, by_time, "starting")
        until_time = timestamps_option(options, parts, backend.match, "ending")
        if until_time is not None:
            end_spec = offsets_by_time(backend, until_time, "ending")
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
            if start > end:
                raise SourceError(f"{tp[0]}-{tp[1]}: the starting offset {start} is after the ending offset {end} "
                                  "(Spark's Kafka source: beginning offset is after the ending offset)")
            if end > start:
                ranges.append((tp, start, end))
    finally:
        backend.close()
    return [Range(backend.range_value(tp, s, e)) for tp, s, e in split_ranges(ranges, want, max_records)]


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


def _duration_ms(options, name: str, default_ms: int) -> int:
    """A Spark duration option such as maxTriggerDelay: "15m", "30s", "500ms" or plain milliseconds."""
    v = opt(options, name)
    if v is None:
        return default_ms
    import re
    m = re.fullmatch(r"\s*(\d+)\s*(ms|s|m|min|h|d)?\s*", str(v).lower())
    if not m:
        raise SourceError(f"option {name}: expected a duration like 15m, 30s or 500ms, got {v!r}")
    scale = {None: 1, "ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}[m.group(2)]
    return int(m.group(1)) * scale


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """A micro-batch stream over the backend's partitions.

    The offset is {"topic": {"partition": next offset}}. The first batch starts at startingOffsets
    (default latest, as in Spark) or a starting time; partitions that appear later (a subscribePattern
    matching a new topic, added partitions) start at their earliest. maxOffsetsPerTrigger caps a
    batch, shared among partitions in proportion to their backlog; minOffsetsPerTrigger holds a batch
    back until that many records wait or maxTriggerDelay has passed. Under trigger(availableNow=True)
    the stream ends at the offsets that were latest when the query started, in batches of at most
    maxOffsetsPerTrigger."""

    def __init__(self, make_backend: Callable[[], Backend], read: Callable[[dict], Iterator]) -> None:
        self.make_backend, self.read_value = make_backend, read
        self._backend: Backend | None = make_backend()
        self.options = options = self._backend.options
        for name in BATCH_ONLY:
            if opt(options, name) is not None:
                raise SourceError(f"option {name} is for batch queries only (Spark's Kafka source: ending offset "
                                  "not valid in streaming queries)")
        self.fail_on_loss = opt_bool(options, "failOnDataLoss", True)
        self.max_per_trigger = opt_int(options, "maxOffsetsPerTrigger", None, minimum=1)
        self.min_per_trigger = opt_int(options, "minOffsetsPerTrigger", None, minimum=1)
        self.max_trigger_delay_ms = _duration_ms(options, "maxTriggerDelay", 15 * 60_000)
        if self.min_per_trigger and self.max_per_trigger and self.min_per_trigger > self.max_per_trigger:
            raise SourceError(f"option minOffsetsPerTrigger: {self.min_per_trigger} is higher than "
                              f"maxOffsetsPerTrigger ({self.max_per_trigger}) (Spark's Kafka source: the value of "
                              "minOffsetPerTrigger is higher than the maxOffsetsPerTrigger)")
        self.min_partitions, self.max_records = split_options(options)
        timestamp_strategy(options)
        self._latest: dict | None = None
        self._stored: dict | None = None
        self._target: dict[Partition, int] | None = None     # availableNow: where the stream ends
        self._last_trigger: float | None = None     # as in Spark's connector, the first trigger never waits

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
        spec = offsets_option(self.options, "startingOffsets", "latest", parts, self.backend.match, batch=False)
        by_time = timestamps_option(self.options, parts, self.backend.match, "starting")
        if by_time is not None:
            spec = offsets_by_time(self.backend, by_time, "starting")
        marks = self.backend.watermarks(parts)
        return _as_offsets({tp: resolve_start(tp, spec[tp], *marks[tp], self.fail_on_loss) for tp in parts})

    def getDefaultReadLimit(self):
        from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows
        return ReadMaxRows(self.max_per_trigger) if self.max_per_trigger else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        parts = self.backend.partitions()
        marks = self.backend.watermarks(parts)
        self._target = {tp: marks[tp][1] for tp in parts}

    def latestOffset(self, start: dict, limit) -> dict:
        from pyspark.sql.streaming.datasource import ReadMaxRows
        begin = _from_offsets(start)
        if start != self._stored:
            # Spark plans a batch only once the one before it is in the sink, so `start` is done with:
            # storing it here keeps the group's offsets current even when no further batch follows
            # (Spark calls commit() for a batch only when it plans the next one; under availableNow it
            # asks once more after the last batch, which stores that batch's end).
            self.backend.commit(start)
            self._stored = start
        if self._target is not None:
            parts = sorted(set(self._target) | set(begin))
            marks = self.backend.watermarks(parts)
            marks = {tp: (lo, min(hi, self._target.get(tp, begin.get(tp, lo)))) for tp, (lo, hi) in marks.items()}
        else:
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
        backlog = {tp: end[tp] - frm[tp] for tp in frm}
        total = sum(backlog.values())
        if self.min_per_trigger and self._target is None:
            # Spark's connector (delayBatch): a batch fires once maxTriggerDelay has passed since the last one
            # fired, else only when at least minOffsetsPerTrigger records wait; the clock restarts either way
            now = time.monotonic()
            waited = self._last_trigger is not None and (now - self._last_trigger) * 1000 < self.max_trigger_delay_ms
            if waited and total < self.min_per_trigger:
                return start                    # too few records yet, and maxTriggerDelay has not passed
            self._last_trigger = now
        cap = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        if cap and total > cap:
            share = {tp: backlog[tp] * cap // total for tp in frm}
            left = cap - sum(share.values())
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
        marks = self.backend.watermarks(list(stop))
        ranges = []
        for tp, e in sorted(stop.items()):
            lo = marks[tp][0]
            s = begin.get(tp, lo)                    # first seen in this batch: from its earliest
            if s < lo:                               # deleted since the batch was planned (a restart)
                if self.fail_on_loss:
                    raise SourceError(f"{tp[0]}-{tp[1]}: offset {s} is no longer available (the earliest is {lo}; "
                                      "records were deleted); set failOnDataLoss=false to skip them")
                s = min(lo, e)
            if e > s:
                ranges.append((tp, s, e))
        ranges = split_ranges(ranges, self.min_partitions, self.max_records)
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
