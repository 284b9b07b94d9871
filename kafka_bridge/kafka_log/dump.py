"""`rmq kafka-log dump FILE|DIR`: the kafka-log peer's files shown the way Kafka's DumpLogSegments
(kafka-dump-log.sh --files ...) shows them: one line per batch of a .log file (with
--print-data-log, one per record), per entry of a .index or .timeindex file. Every batch's CRC is
checked; a torn or corrupt tail is reported, and the command exits 1 when anything was wrong.
What the log cleaner did shows too: the offsets it removed (a gap between batches, or between
records with --print-data-log), a batch's deleteHorizonMs, and for a partition directory the
cleaner's checkpoint (the first dirty offset) and the cleaning files left by an interrupted swap."""
from __future__ import annotations

import os
import struct

import click

from ..records import RecordBatch, RecordsError
from .segment import OFFSET_ENTRY, TIME_ENTRY


def dump_log(path: str, print_data: bool, echo) -> int:
    with open(path, "rb") as fh:
        data = fh.read()
    echo(f"Dumping {path}")
    base = int(os.path.basename(path)[:-4]) if os.path.basename(path)[:-4].isdigit() else 0
    echo(f"Log starting offset: {base}")
    pos, problems = 0, 0
    expect = base
    while pos < len(data):
        try:
            b = RecordBatch(data, pos, verify_crc=True)
        except RecordsError as exc:
            echo(f"Found {len(data) - pos} invalid bytes at position {pos}: {exc}")
            problems += 1
            break
        size = b.batch_length + 12
        recs = b.records() if print_data else None
        first = b.base_offset + recs[0].offset_delta if recs else b.base_offset
        if first > expect:
            echo(f"| offsets {expect}-{first - 1} removed by the log cleaner")
        horizon = f" deleteHorizonMs: {b.base_timestamp}" if b.has_delete_horizon else ""
        echo(f"baseOffset: {b.base_offset} lastOffset: {b.base_offset + b.last_offset_delta} count: "
             f"{b.records_count} baseSequence: {b.base_sequence} lastSequence: "
             f"{b.base_sequence + b.last_offset_delta if b.base_sequence >= 0 else -1} producerId: "
             f"{b.producer_id} producerEpoch: {b.producer_epoch} partitionLeaderEpoch: {b.partition_leader_epoch} "
             f"isTransactional: {str(b.is_transactional).lower()} isControl: {str(b.is_control).lower()} "
             f"position: {pos} {'LogAppendTime' if b.timestamp_type == 1 else 'CreateTime'}: {b.max_timestamp} "
             f"size: {size} magic: {b.magic} compresscodec: {b.compression.name.lower()} crc: {b.crc} isvalid: true"
             f"{horizon}")
        if print_data:
            prev = first
            for r in recs:
                o = b.base_offset + r.offset_delta
                if o > prev:
                    echo(f"| offsets {prev}-{o - 1} removed by the log cleaner")
                prev = o + 1
                echo(f"| offset: {b.base_offset + r.offset_delta} {'CreateTime' if b.timestamp_type == 0 else 'LogAppendTime'}: "
                     f"{r.timestamp} keySize: {-1 if r.key is None else len(r.key)} valueSize: "
                     f"{-1 if r.value is None else len(r.value)} headerKeys: [{','.join(k for k, _ in r.headers)}]")
        pos += size
        expect = b.base_offset + b.last_offset_delta + 1
    return problems


def dump_index(path: str, echo) -> int:
    base = int(os.path.basename(path).split(".")[0])
    with open(path, "rb") as fh:
        data = fh.read()
    echo(f"Dumping {path}")
    time_index = path.endswith(".timeindex")
    st = TIME_ENTRY if time_index else OFFSET_ENTRY
    for i in range(0, len(data) - len(data) % st.size, st.size):
        a, b = st.unpack_from(data, i)
        echo(f"timestamp: {a} offset: {base + b}" if time_index else f"offset: {base + a} position: {b}")
    if len(data) % st.size:
        echo(f"Found {len(data) % st.size} trailing bytes that are not a whole entry")
        return 1
    return 0


def _cleaner_state(directory: str, echo) -> None:
    """A partition directory's cleaner state: its line of <log.dir>/cleaner-offset-checkpoint and any
    file of a cleaning that has not finished (load() completes or drops them)."""
    from .cleaner import CLEANER_CHECKPOINT
    from .manager import read_checkpoint, split_dir_name
    tp = split_dir_name(os.path.basename(os.path.normpath(directory)))
    ck = os.path.join(os.path.dirname(os.path.normpath(directory)), CLEANER_CHECKPOINT)
    if tp is not None and os.path.exists(ck):
        try:
            first_dirty = read_checkpoint(ck).get(tp)
        except (ValueError, OSError) as exc:
            echo(f"{ck}: {exc}")
            first_dirty = None
        if first_dirty is not None:
            echo(f"Log cleaner: offsets below {first_dirty} are cleaned (first dirty offset {first_dirty})")
    for f in sorted(os.listdir(directory)):
        if f.endswith(".log.cleaned") or ".log.swap." in f:
            echo(f"Cleaning in progress: {f}")


@click.group("kafka-log")
def kafka_log() -> None:
    """Look inside a kafka-log directory (kafkaStorage kafka-log: Kafka's own log design)."""


@kafka_log.command("dump")
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True))
@click.option("--print-data-log", "print_data", is_flag=True, help="One line per record too.")
def dump(paths, print_data) -> None:
    """Show .log, .index and .timeindex files (a partition directory: all of its files) as Kafka's
    DumpLogSegments does."""
    files = []
    for p in paths:
        if os.path.isdir(p):
            files += sorted(os.path.join(p, f) for f in os.listdir(p) if f.endswith((".log", ".index", ".timeindex")))
        else:
            files.append(p)
    if not files:
        raise click.ClickException(f"{', '.join(paths)}: no .log, .index or .timeindex files there")
    problems = 0
    for p in paths:
        if os.path.isdir(p):
            _cleaner_state(p, click.echo)
    for f in files:
        try:
            if f.endswith(".log"):
                problems += dump_log(f, print_data, click.echo)
            elif f.endswith((".index", ".timeindex")):
                problems += dump_index(f, click.echo)
            else:
                raise click.ClickException(f"{f}: expected a .log, .index or .timeindex file")
        except (OSError, ValueError, struct.error) as exc:
            raise click.ClickException(f"{f}: {exc}") from None
    if problems:
        raise SystemExit(1)
