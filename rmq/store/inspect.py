"""`rmq store inspect`: read a store directory the way the seed diagrams draw it (SPEC §2, seeds 001/003).

Read-only: files are opened without recovery and nothing is written, so it is safe on a store a
broker is using. Shows commitlog units field by field, consumequeue units with the commitlog unit
each points to, index headers, slots in use and the chain for a key, then a summary.
"""
from __future__ import annotations

import datetime as _dt
import json
import mmap
import os
import struct

from rmq.common.jhash import java_string_hash
from rmq.common.message import (
    BLANK_MAGIC_CODE,
    MESSAGE_MAGIC_CODE,
    CorruptMessage,
    decode_message,
    read_total_and_magic,
)

from .consume_queue import CQ_STORE_UNIT_SIZE, CQ_UNIT
from .index import HASH_SLOT_SIZE, INDEX_HEADER_SIZE, INDEX_SIZE, build_key, index_key_hash
from . import offset_journal
from .mapped_file import StoreError

_HEADER = struct.Struct(">qqqqii")
_ENTRY = struct.Struct(">iqii")


def _ts(ms: int) -> str:
    if ms <= 0:
        return "0"
    try:
        return _dt.datetime.fromtimestamp(ms / 1000).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
    except (OverflowError, OSError, ValueError):
        return str(ms)


def _map(path: str):
    size = os.path.getsize(path)
    if size == 0:
        return b""
    with open(path, "rb") as fh:
        return mmap.mmap(fh.fileno(), size, access=mmap.ACCESS_READ)


def _preview(body: bytes, n: int = 40) -> str:
    text = body[:n].decode("utf-8", errors="replace")
    text = "".join(c if c.isprintable() else "." for c in text)
    return repr(text + ("…" if len(body) > n else ""))


def check_store_dir(root: str) -> None:
    if not os.path.isdir(root):
        raise StoreError(f"{root}: no such directory")
    if not any(os.path.isdir(os.path.join(root, d)) for d in ("commitlog", "consumequeue", "index")):
        raise StoreError(f"{root}: not a RocketMQ store (no commitlog/, consumequeue/ or index/ inside)")


def _listdir(path: str) -> list[str]:
    return sorted(os.listdir(path)) if os.path.isdir(path) else []


# ---------------------------------------------------------------------------- commitlog
def scan_commitlog(root: str, limit: int | None = None, topic: str | None = None) -> dict:
    cdir = os.path.join(root, "commitlog")
    summary = {"messages": 0, "blank_units": 0, "bytes": 0, "topics": {}, "corrupt": None, "end_offset": 0,
               "matching": 0}
    names = _listdir(cdir)
    for name in names:
        path = os.path.join(cdir, name)
        if not (len(name) == 20 and name.isdigit()):
            raise StoreError(f"{path}: unexpected file in commitlog/ (names are 20-digit offsets)")
    return _scan_commitlog_files([(name, os.path.join(cdir, name)) for name in names], limit, topic, summary)


def _scan_commitlog_files(paths: list[tuple[str, str]], limit, topic, summary) -> dict:
    files = []
    units = []
    for name, path in paths:
        base = int(name) if name.isdigit() else 0
        size = os.path.getsize(path)
        mm = _map(path)
        pos = 0
        finfo = {"file": name, "start_offset": base, "size": size, "units": 0, "written": 0}
        files.append(finfo)
        while pos + 8 <= size:
            total, magic = read_total_and_magic(mm, pos)
            if total == 0 and magic == 0:
                break
            if magic == BLANK_MAGIC_CODE:
                summary["blank_units"] += 1
                if limit is None or len(units) < limit:
                    units.append({"offset": base + pos, "TOTALSIZE": total, "MAGICCODE": "BLANK (END_OF_FILE)",
                                  "file": name})
                pos = size if total == size - pos else pos + max(total, 8)
                break
            if magic != MESSAGE_MAGIC_CODE:
                summary["corrupt"] = f"{name}: unknown magic code {magic & 0xFFFFFFFF:#010x} at offset {base + pos}"
                break
            try:
                m = decode_message(mm[pos:pos + total] if 0 < total <= size - pos else b"\0" * 8, 0, check_crc=True)
            except CorruptMessage as exc:
                summary["corrupt"] = f"{name}: unit at offset {base + pos}: {exc}"
                break
            finfo["units"] += 1
            summary["messages"] += 1
            summary["bytes"] += total
            summary["topics"][m.topic] = summary["topics"].get(m.topic, 0) + 1
            if topic is not None and m.topic != topic:
                pos += total
                continue
            summary["matching"] += 1
            if limit is None or len(units) < limit:
                units.append({
                    "offset": base + pos, "file": name, "TOTALSIZE": total, "MAGICCODE": "MESSAGE",
                    "BODYCRC": m.body_crc, "QUEUEID": m.queue_id, "FLAG": m.flag,
                    "QUEUEOFFSET": m.queue_offset, "PHYSICALOFFSET": m.commit_log_offset,
                    "SYSFLAG": m.sys_flag, "BORNTIMESTAMP": m.born_timestamp,
                    "BORNHOST": f"{m.born_host[0]}:{m.born_host[1]}", "STORETIMESTAMP": m.store_timestamp,
                    "STOREHOST": f"{m.store_host[0]}:{m.store_host[1]}", "RECONSUMETIMES": m.reconsume_times,
                    "PREPARED_TRANSACTION_OFFSET": m.prepared_transaction_offset,
                    "BODY": {"length": len(m.body), "preview": _preview(m.body)},
                    "TOPIC": m.topic, "PROPERTIES": m.properties, "msgId": m.msg_id,
                })
            pos += total
        finfo["written"] = pos
        summary["end_offset"] = base + pos
        if summary["corrupt"]:
            break
    return {"files": files, "units": units, "summary": summary}


# ---------------------------------------------------------------------------- consumequeue
def scan_consumequeue(root: str, limit: int | None = None, topic: str | None = None,
                      queue_id: int | None = None, only_file: str | None = None) -> dict:
    qroot = os.path.join(root, "consumequeue")
    cl_files = []
    for name in _listdir(os.path.join(root, "commitlog")):
        if len(name) == 20 and name.isdigit():
            cl_files.append((int(name), os.path.join(root, "commitlog", name)))
    maps = {}
    cl_min = cl_files[0][0] if cl_files else 0

    def cl_unit(phy: int):
        for base, path in cl_files:
            size = os.path.getsize(path)
            if base <= phy < base + size:
                if path not in maps:
                    maps[path] = _map(path)
                mm = maps[path]
                try:
                    total, magic = read_total_and_magic(mm, phy - base)
                    if magic != MESSAGE_MAGIC_CODE or total <= 0:
                        return None
                    return decode_message(mm[phy - base:phy - base + total])
                except (CorruptMessage, struct.error, ValueError):
                    return None
        return None

    queues = []
    for t in _listdir(qroot):
        if topic is not None and t != topic:
            continue
        for q in _listdir(os.path.join(qroot, t)):
            if not q.isdigit() or (queue_id is not None and int(q) != queue_id):
                continue
            qdir = os.path.join(qroot, t, q)
            entry = {"topic": t, "queueId": int(q), "files": [], "units": [], "count": 0,
                     "minOffset": None, "maxOffset": 0, "mismatches": 0}
            for name in _listdir(qdir):
                if only_file is not None and name != only_file:
                    continue
                path = os.path.join(qdir, name)
                base = int(name) if name.isdigit() else 0
                mm = _map(path)
                n = len(mm) // CQ_STORE_UNIT_SIZE
                used = 0
                for i in range(n):
                    phy, size, code = CQ_UNIT.unpack_from(mm, i * CQ_STORE_UNIT_SIZE)
                    if size == 0 and phy == 0:
                        break
                    used += 1
                    logical = base // CQ_STORE_UNIT_SIZE + i
                    if size == 0x7FFFFFFF:
                        continue
                    if entry["minOffset"] is None:
                        entry["minOffset"] = logical
                    entry["maxOffset"] = logical + 1
                    entry["count"] += 1
                    show = limit is None or len(entry["units"]) < limit
                    m = cl_unit(phy)
                    u = {"queueOffset": logical, "commitLogOffset": phy, "size": size, "tagsCode": code}
                    if m is None and 0 <= phy < cl_min:
                        u["points_to"] = "a unit in a commitlog file already deleted by cleanup"
                    elif m is None:
                        u["points_to"] = "nothing readable (beyond the log, or not a message unit)  << MISMATCH"
                        entry["mismatches"] += 1
                    else:
                        ok = (m.topic == t and m.queue_id == int(q) and m.queue_offset == logical
                              and m.store_size == size)
                        tags = m.properties.get("TAGS")
                        u["points_to"] = (f"unit of {m.store_size} B, topic {m.topic}, QUEUEOFFSET "
                                          f"{m.queue_offset}, TAGS {tags!r}" + ("" if ok else "  << MISMATCH"))
                        if t == "SCHEDULE_TOPIC_XXXX":
                            # ScheduleMessageService: the tag field is when the message is due
                            u["tagsCode_check"] = f"= delivery time {_ts(code)} (level {m.properties.get('DELAY')})"
                        elif tags:
                            u["tagsCode_check"] = "= hash(TAGS)" if java_string_hash(tags) == code else "delivery time" \
                                if "DELAY" in m.properties else "!= hash(TAGS)"
                        if not ok:
                            entry["mismatches"] += 1
                    if show:
                        entry["units"].append(u)
                entry["files"].append({"file": name, "units": used, "capacity": n})
            if entry["minOffset"] is None:
                entry["minOffset"] = 0
            queues.append(entry)
    return {"queues": queues}


# ---------------------------------------------------------------------------- index
def scan_index(root: str, key: str | None = None, topic: str | None = None, limit: int | None = None,
               hash_slot_num: int = 5_000_000, only_file: str | None = None) -> dict:
    idir = os.path.join(root, "index")
    out = []
    for name in _listdir(idir):
        if only_file is not None and name != only_file:
            continue
        path = os.path.join(idir, name)
        mm = _map(path)
        if len(mm) < INDEX_HEADER_SIZE:
            raise StoreError(f"{path}: {len(mm)} bytes, shorter than the 40-byte index header")
        bt, et, bp, ep, slots_count, idx_count = _HEADER.unpack_from(mm, 0)
        # The slot count is not in the header; derive it from the file size and the default ratio
        # (indexNum = 4 x hashSlotNum) unless told otherwise.
        total = len(mm) - INDEX_HEADER_SIZE
        slot_num = hash_slot_num
        if slot_num * HASH_SLOT_SIZE + 4 * slot_num * INDEX_SIZE != total:
            slot_num = total // (HASH_SLOT_SIZE + 4 * INDEX_SIZE)
        index_num = (total - slot_num * HASH_SLOT_SIZE) // INDEX_SIZE
        entries_base = INDEX_HEADER_SIZE + slot_num * HASH_SLOT_SIZE
        used_slots = 0
        slot_bytes = mm[INDEX_HEADER_SIZE:entries_base]
        for (v,) in struct.iter_unpack(">i", slot_bytes):
            if v > 0:
                used_slots += 1
        info = {"file": name, "size": len(mm), "beginTimestamp": bt, "endTimestamp": et,
                "beginPhyOffset": bp, "endPhyOffset": ep, "hashSlotCount": slots_count,
                "indexCount": idx_count, "hashSlotNum": slot_num, "indexNum": index_num,
                "slotsInUse": used_slots, "entries": [], "chain": None, "problems": []}
        info["problems"] = _index_header_problems(info, total, struct.iter_unpack(">i", slot_bytes))
        n = min(max(idx_count - 1, 0), index_num) if not info["problems"] else 0
        info["entryCount"] = n
        bad_entries = 0
        for i in range(1, n + 1):
            h, phy, diff, prev = _ENTRY.unpack_from(mm, entries_base + i * INDEX_SIZE)
            if not 0 <= prev < i or phy < 0 or (ep and phy > ep) or diff < 0:
                bad_entries += 1
            if limit is None or len(info["entries"]) < limit:
                info["entries"].append({"no": i, "keyHash": h, "phyOffset": phy, "timeDiff": diff,
                                        "prevIndexNo": prev, "slot": h % slot_num})
        if bad_entries:
            info["problems"].append(f"{bad_entries} entr(y/ies) with a prevIndexNo not below their own number, "
                                    "a negative time difference or an offset outside the header's range")
        if key is not None and not info["problems"]:
            full = build_key(topic, key) if topic else key
            h = index_key_hash(full)
            slot = h % slot_num
            (head,) = struct.unpack_from(">i", mm, INDEX_HEADER_SIZE + slot * HASH_SLOT_SIZE)
            chain = []
            nxt = head
            seen = 0
            while 0 < nxt <= idx_count and seen < 10_000:
                seen += 1
                kh, phy, diff, prev = _ENTRY.unpack_from(mm, entries_base + nxt * INDEX_SIZE)
                chain.append({"no": nxt, "keyHash": kh, "phyOffset": phy, "timeDiff": diff,
                              "storeTime": _ts(bt + diff * 1000), "prevIndexNo": prev,
                              "match": kh == h})
                if prev <= 0 or prev == nxt:
                    break
                nxt = prev
            info["chain"] = {"key": full, "keyHash": h, "slot": slot, "slotValue": head, "entries": chain}
        out.append(info)
    return {"files": out}


def _index_header_problems(info: dict, body_size: int, slots) -> list[str]:
    """What makes an index file's header impossible (random bytes, a torn or foreign file)."""
    out = []
    slot_num, index_num, count = info["hashSlotNum"], info["indexNum"], info["indexCount"]
    if slot_num <= 0 or slot_num * HASH_SLOT_SIZE + index_num * INDEX_SIZE != body_size:
        out.append(f"size {info['size']} is not 40 + 4 x slots + 20 x entries for any slot count")
    if not 1 <= count <= index_num + 1:
        out.append(f"indexCount {count} is impossible for a file of {index_num} entries (1..{index_num + 1})")
    if not 0 <= info["hashSlotCount"] <= max(slot_num, 0):
        out.append(f"hashSlotCount {info['hashSlotCount']} is outside 0..{slot_num}")
    if info["beginPhyOffset"] < 0 or info["endPhyOffset"] < info["beginPhyOffset"]:
        out.append(f"phy offsets [{info['beginPhyOffset']}, {info['endPhyOffset']}] are not an ordered range")
    if info["beginTimestamp"] < 0 or info["endTimestamp"] < info["beginTimestamp"]:
        out.append(f"timestamps [{info['beginTimestamp']}, {info['endTimestamp']}] are not an ordered range")
    if not out:
        bad = sum(1 for (v,) in slots if not 0 <= v < count)
        if bad:
            out.append(f"{bad} hash slot(s) name an entry beyond indexCount {count}")
    return out


def _problems(report: dict) -> list[str]:
    """Everything that says the store is corrupt (the CLI exits 1 when this is not empty)."""
    out = []
    cl = report.get("commitlog")
    if cl and cl["summary"]["corrupt"]:
        out.append(f"commitlog: {cl['summary']['corrupt']}")
    for q in (report.get("consumequeue") or {}).get("queues", []):
        if q["mismatches"]:
            out.append(f"consumequeue {q['topic']}/{q['queueId']}: {q['mismatches']} unit(s) do not match the "
                       "commitlog unit they point to")
    for f in (report.get("index") or {}).get("files", []):
        out.extend(f"index {f['file']}: {p}" for p in f["problems"])
    out.extend(f"compaction {p}" for p in (report.get("compaction") or {}).get("problems", []))
    return out


def _single_file(path: str) -> tuple[str, str, dict]:
    """A file inside a store: (store root, section, selectors), or StoreError saying what is accepted."""
    path = os.path.abspath(path)
    parent = os.path.dirname(path)
    name = os.path.basename(path)
    if os.path.basename(parent) == "commitlog":
        return os.path.dirname(parent), "commitlog", {"only_file": name}
    if os.path.basename(parent) == "index":
        return os.path.dirname(parent), "index", {"only_file": name}
    qdir, tdir = parent, os.path.dirname(parent)
    if os.path.basename(os.path.dirname(tdir)) == "consumequeue" and os.path.basename(qdir).isdigit():
        return (os.path.dirname(os.path.dirname(tdir)), "consumequeue",
                {"only_file": name, "topic": os.path.basename(tdir), "queue_id": int(os.path.basename(qdir))})
    raise StoreError(f"{path}: a file, but not one inside a store's commitlog/, consumequeue/<topic>/<queueId>/ "
                     "or index/ directory; give the store directory or one of those files")


# ---------------------------------------------------------------------------- rendering
def inspect_store(root: str, what: str | None = None, *, limit: int | None = 20, topic: str | None = None,
                  queue_id: int | None = None, key: str | None = None) -> dict:
    """The report for a store directory, or for one commitlog/consumequeue/index file of a store.
    ``report["problems"]`` lists what is corrupt (empty for a sound store)."""
    only: dict = {}
    if os.path.isfile(root):
        root, section, only = _single_file(root)
        if what not in (None, section):
            raise StoreError(f"{only['only_file']} is a {section} file; it has no {what} section")
        what = section
        topic = only.pop("topic", topic)
        queue_id = only.pop("queue_id", queue_id)
    check_store_dir(root)
    report: dict = {"store": os.path.abspath(root), "topic": topic}
    if only:
        report["file"] = only["only_file"]
    if what in (None, "commitlog"):
        if only:
            summary = {"messages": 0, "blank_units": 0, "bytes": 0, "topics": {}, "corrupt": None,
                       "end_offset": 0, "matching": 0}
            name = only["only_file"]
            report["commitlog"] = _scan_commitlog_files([(name, os.path.join(root, "commitlog", name))],
                                                        limit, topic, summary)
        else:
            report["commitlog"] = scan_commitlog(root, limit, topic)
    if what in (None, "consumequeue"):
        report["consumequeue"] = scan_consumequeue(root, limit, topic, queue_id, **only)
    if what in (None, "index"):
        report["index"] = scan_index(root, key, topic, limit, **only)
    if what in (None, "compaction") and not only:
        report["compaction"] = scan_compaction(root, topic, queue_id, limit)
    cp = os.path.join(root, "checkpoint")
    if os.path.exists(cp):
        with open(cp, "rb") as fh:
            vals = struct.unpack(">qqqqq", fh.read(40).ljust(40, b"\0"))
        report["checkpoint"] = dict(zip(("physicMsgTimestamp", "logicsMsgTimestamp", "indexMsgTimestamp",
                                         "masterFlushedOffset", "confirmPhyOffset"), vals))
    report["abort_file"] = os.path.exists(os.path.join(root, "abort"))
    report["problems"] = _problems(report)
    return report


def scan_compaction(root: str, topic: str | None = None, queue_id: int | None = None,
                    limit: int | None = None) -> dict:
    """compaction/<topic>/<queueId>/ (rmq.store.compaction): per queue, the cleaned point, the units
    the compacted log kept (queue offsets, tombstone horizons) and what its last pass did."""
    from .compaction import ENTRY
    base = os.path.join(root, "compaction")
    queues, problems = [], []
    for t in _listdir(base):
        if topic is not None and t != topic:
            continue
        for q in _listdir(os.path.join(base, t)):
            if not q.isdigit() or queue_id is not None and int(q) != queue_id:
                continue
            d = os.path.join(base, t, q)
            if not os.path.exists(os.path.join(d, "position.json")):
                continue                   # no pass has finished for this queue yet
            try:
                with open(os.path.join(d, "position.json"), encoding="utf-8") as fh:
                    pos = json.load(fh)
                gen = int(pos["generation"])
                with open(os.path.join(d, f"{gen:020d}.cq"), "rb") as fh:
                    raw = fh.read()
                log_size = os.path.getsize(os.path.join(d, f"{gen:020d}.log"))
            except (OSError, ValueError, KeyError, TypeError) as exc:
                problems.append(f"{d}: unreadable compacted log ({exc})")
                continue
            entries = [ENTRY.unpack_from(raw, i) for i in range(0, len(raw) - len(raw) % ENTRY.size, ENTRY.size)]
            if len(raw) % ENTRY.size or any(e[1] + e[2] > log_size for e in entries):
                problems.append(f"{d}: {gen:020d}.cq has entries past the end of {gen:020d}.log")
            shown = entries if limit is None else entries[:limit]
            queues.append({"topic": t, "queueId": int(q), "generation": gen, "start": pos.get("start"),
                           "cleanedTo": pos.get("cleanedTo"), "units": len(entries), "bytes": log_size,
                           "tombstones": sum(1 for e in entries if e[3] >= 0),
                           "entries": [{"queueOffset": e[0], "position": e[1], "size": e[2], "deleteHorizon": e[3]}
                                       for e in shown],
                           "lastClean": pos.get("lastClean")})
    return {"queues": queues, "problems": problems}


def render_text(rep: dict) -> str:
    lines = [f"store {rep['store']}" + (f"  (only the file {rep['file']})" if rep.get("file") else "")]
    if "checkpoint" in rep:
        cp = rep["checkpoint"]
        lines.append(f"checkpoint: physicMsgTimestamp={_ts(cp['physicMsgTimestamp'])} "
                     f"logicsMsgTimestamp={_ts(cp['logicsMsgTimestamp'])} indexMsgTimestamp={_ts(cp['indexMsgTimestamp'])}"
                     f" confirmPhyOffset={cp['confirmPhyOffset']}")
    lines.append("abort file: " + ("present (last shutdown was not clean; a broker opening it recovers abnormally)"
                                   if rep["abort_file"] else "absent (clean shutdown, or a store never opened)"))
    if "commitlog" in rep:
        cl = rep["commitlog"]
        lines.append("")
        lines.append("== commitlog/  (one log for all topics; units back to back) ==")
        for f in cl["files"]:
            lines.append(f"  file {f['file']}  start offset {f['start_offset']}  size {f['size']}  "
                         f"written {f['written']}  messages {f['units']}")
        for u in cl["units"]:
            lines.append("")
            if u["MAGICCODE"].startswith("BLANK"):
                lines.append(f"  @{u['offset']:<12} TOTALSIZE {u['TOTALSIZE']}  MAGICCODE BLANK_MAGIC_CODE "
                             f"(0xCBD43194): end of file, next unit starts the next file")
                continue
            lines.append(f"  @{u['offset']:<12} unit in {u['file']}, msgId {u['msgId']}")
            for k in ("TOTALSIZE", "MAGICCODE", "BODYCRC", "QUEUEID", "FLAG", "QUEUEOFFSET", "PHYSICALOFFSET",
                      "SYSFLAG"):
                val = u[k] if k != "MAGICCODE" else "MESSAGE_MAGIC_CODE (0xDAA320A7)"
                lines.append(f"      {k:<28} {val}")
            lines.append(f"      {'BORNTIMESTAMP':<28} {u['BORNTIMESTAMP']} ({_ts(u['BORNTIMESTAMP'])})")
            lines.append(f"      {'BORNHOST':<28} {u['BORNHOST']}")
            lines.append(f"      {'STORETIMESTAMP':<28} {u['STORETIMESTAMP']} ({_ts(u['STORETIMESTAMP'])})")
            lines.append(f"      {'STOREHOST':<28} {u['STOREHOST']}")
            lines.append(f"      {'RECONSUMETIMES':<28} {u['RECONSUMETIMES']}")
            lines.append(f"      {'PREPARED TRANSACTION OFFSET':<28} {u['PREPARED_TRANSACTION_OFFSET']}")
            lines.append(f"      {'BODY':<28} {u['BODY']['length']} bytes {u['BODY']['preview']}")
            lines.append(f"      {'TOPIC':<28} {u['TOPIC']}")
            props = "  ".join(f"{k}={v}" for k, v in u["PROPERTIES"].items()) or "(none)"
            lines.append(f"      {'PROPERTIES':<28} {props}")
        s = cl["summary"]
        shown = len([u for u in cl["units"] if u["MAGICCODE"] == "MESSAGE"])
        if shown < s["matching"]:
            lines.append(f"  ... {s['matching'] - shown} more message units"
                         + (f" of topic {rep['topic']}" if rep.get("topic") else "") + " (use --limit)")
        if s["corrupt"]:
            lines.append(f"  !! CORRUPT: {s['corrupt']} (a broker truncates the log here on abnormal recovery)")
    if "consumequeue" in rep:
        lines.append("")
        lines.append("== consumequeue/<topic>/<queueId>/  (20-byte units: commitlog offset 8, size 4, tag hashcode 8) ==")
        for q in rep["consumequeue"]["queues"]:
            files = ", ".join(f"{f['file']} ({f['units']}/{f['capacity']} units)" for f in q["files"])
            lines.append(f"  {q['topic']}/{q['queueId']}: offsets [{q['minOffset']}, {q['maxOffset']})  files: {files}")
            for u in q["units"]:
                extra = f"  tagsCode {u.get('tagsCode_check')}" if u.get("tagsCode_check") else ""
                lines.append(f"      #{u['queueOffset']:<6} -> commitlog @{u['commitLogOffset']:<10} size {u['size']:<6} "
                             f"tagsCode {u['tagsCode']:<12} => {u['points_to']}{extra}")
            if len(q["units"]) < q["count"]:
                lines.append(f"      ... {q['count'] - len(q['units'])} more units")
            if q["mismatches"]:
                lines.append(f"      !! {q['mismatches']} unit(s) do not match the commitlog unit they point to")
    if "index" in rep:
        lines.append("")
        lines.append("== index/<yyyyMMddHHmmssSSS>  (header 40 B | hash slots x 4 B | entries x 20 B) ==")
        for f in rep["index"]["files"]:
            lines.append(f"  file {f['file']}  size {f['size']}  slots {f['hashSlotNum']}  entries capacity {f['indexNum']}")
            lines.append(f"      header: beginTimestamp {_ts(f['beginTimestamp'])}  endTimestamp {_ts(f['endTimestamp'])}")
            lines.append(f"              beginPhyOffset {f['beginPhyOffset']}  endPhyOffset {f['endPhyOffset']}  "
                         f"hashSlotCount {f['hashSlotCount']}  indexCount {f['indexCount']} (entry numbers start at 1)")
            lines.append(f"      slots in use: {f['slotsInUse']} of {f['hashSlotNum']}")
            for p in f["problems"]:
                lines.append(f"      !! CORRUPT: {p}")
            for e in f["entries"]:
                lines.append(f"      entry {e['no']:<6} keyHash {e['keyHash']:<11} slot {e['slot']:<8} phyOffset {e['phyOffset']:<10} "
                             f"timeDiff {e['timeDiff']:<5}s prevIndexNo {e['prevIndexNo']}")
            ch = f["chain"]
            if ch is not None:
                lines.append(f"      chain for {ch['key']!r}: keyHash {ch['keyHash']} -> slot {ch['slot']} holds entry {ch['slotValue']}")
                if not ch["entries"]:
                    lines.append("          (empty slot: key not in this file)")
                for e in ch["entries"]:
                    mark = "match" if e["match"] else "other key, same slot (collision)"
                    lines.append(f"          entry {e['no']}: phyOffset {e['phyOffset']} stored {e['storeTime']} "
                                 f"prev {e['prevIndexNo']}  [{mark}]")
    if "compaction" in rep and rep["compaction"]["queues"]:
        lines.append("")
        lines.append("== compaction/<topic>/<queueId>/  (compacted log: surviving units; .cq entries: queue offset 8, "
                     "position 8, size 4, delete horizon 8) ==")
        for q in rep["compaction"]["queues"]:
            lines.append(f"  {q['topic']}/{q['queueId']}: offsets [{q['start']}, {q['cleanedTo']}) cleaned, "
                         f"{q['units']} unit(s) kept ({q['tombstones']} tombstone(s)), {q['bytes']} bytes, "
                         f"generation {q['generation']}")
            last = q.get("lastClean") or {}
            if last:
                removed = last.get("units_read", 0) - last.get("units_kept", 0)
                lines.append(f"      last pass ({last.get('reason')}): dirty [{last.get('cleaned_from')}, "
                             f"{last.get('cleaned_to')}), {last.get('units_read')} units read, {removed} removed "
                             f"({last.get('superseded')} superseded, {last.get('tombstones_removed')} tombstones, "
                             f"{last.get('keyless_removed')} keyless), {last.get('bytes_read')} -> "
                             f"{last.get('bytes_written')} bytes")
            prev = q["start"]
            for e in q["entries"]:
                if e["queueOffset"] > prev:
                    lines.append(f"      offsets {prev}-{e['queueOffset'] - 1} removed by compaction")
                tomb = f"  tombstone, goes after {_ts(e['deleteHorizon'])}" if e["deleteHorizon"] >= 0 else ""
                lines.append(f"      #{e['queueOffset']:<6} @{e['position']:<10} size {e['size']}{tomb}")
                prev = e["queueOffset"] + 1
            if len(q["entries"]) < q["units"]:
                lines.append(f"      ... {q['units'] - len(q['entries'])} more units")
    lines.append("")
    lines.append("== summary ==")
    if "commitlog" in rep:
        s = rep["commitlog"]["summary"]
        topics = ", ".join(f"{t}={n}" for t, n in sorted(s["topics"].items())) or "none"
        lines.append(f"  commitlog: {len(rep['commitlog']['files'])} file(s), {s['messages']} message units, "
                     f"{s['blank_units']} blank unit(s), {s['bytes']} bytes of messages, log ends at {s['end_offset']}")
        lines.append(f"  messages per topic: {topics}")
    if "consumequeue" in rep:
        qs = rep["consumequeue"]["queues"]
        lines.append(f"  consumequeue: {len(qs)} queue(s), {sum(q['count'] for q in qs)} units, "
                     f"{sum(q['mismatches'] for q in qs)} mismatch(es)")
    if "index" in rep:
        fs = rep["index"]["files"]
        lines.append(f"  index: {len(fs)} file(s), {sum(f['entryCount'] for f in fs)} entries"
                     + (" (files with an impossible header count none)" if any(f["problems"] for f in fs) else ""))
    probs = rep.get("problems", [])
    lines.append(f"  problems: {len(probs)}" + (" -- the store is CORRUPT:" if probs else ""))
    lines.extend(f"    - {p}" for p in probs)
    return "\n".join(lines)


# ---------------------------------------------------------------------------- one message's history
_SHARE_STATE_NAMES = {0: "Available", 1: "Acquired", 2: "Acknowledged", 4: "Archived"}


def _read_json(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise StoreError(f"{path}: not readable as JSON ({exc})")
    return data if isinstance(data, dict) else {}


def message_history(root: str, *, topic: str | None = None, queue_id: int | None = None,
                    offset: int | None = None, msg_id: str | None = None) -> dict:
    """One message seen from both sides: the unit (by topic, queueId and queue offset, or by its
    offsetMsgId or client msgId), every copy the broker made of it (CONSUMER_SEND_MSG_BACK into
    SCHEDULE_TOPIC_XXXX, %RETRY%group and %DLQ%group, found by ORIGIN_MESSAGE_ID or UNIQ_KEY),
    and what each group has done with it: RocketMQ and Kafka groups by their committed offset
    (config/consumerOffset.json and the Kafka commits journaled after it), Kafka share groups by the record's state and delivery count
    (config/kafkaShareGroups.json, as last saved). Scans the whole commitlog; read-only."""
    check_store_dir(root)
    if msg_id is None and (topic is None or queue_id is None or offset is None):
        raise StoreError("history needs --msg-id, or --topic, --queue and --offset")
    units = []  # every message unit: (decoded message, physical offset)
    for name in _listdir(os.path.join(root, "commitlog")):
        if not (len(name) == 20 and name.isdigit()):
            continue
        path = os.path.join(root, "commitlog", name)
        mm = _map(path)
        size = len(mm)
        pos = 0
        while pos + 8 <= size:
            total, magic = read_total_and_magic(mm, pos)
            if magic != MESSAGE_MAGIC_CODE or total <= 0 or total > size - pos:
                break
            try:
                units.append(decode_message(mm[pos:pos + total], 0))
            except CorruptMessage:
                break
            pos += total
    original = None
    for m in units:
        if msg_id is not None:
            if m.msg_id == msg_id or m.properties.get("UNIQ_KEY") == msg_id and "ORIGIN_MESSAGE_ID" not in m.properties:
                original = m
                break
        elif m.topic == topic and m.queue_id == queue_id and m.queue_offset == offset:
            original = m
            break
    if original is None:
        what = f"msgId {msg_id}" if msg_id is not None else f"{topic} queue {queue_id} offset {offset}"
        raise StoreError(f"{root}: no message with {what} in the commitlog")
    uniq = original.properties.get("UNIQ_KEY")

    def row(m, kind: str) -> dict:
        return {"kind": kind, "topic": m.topic, "queueId": m.queue_id, "queueOffset": m.queue_offset,
                "commitLogOffset": m.commit_log_offset, "storeTimestamp": m.store_timestamp,
                "storeTime": _ts(m.store_timestamp), "reconsumeTimes": m.reconsume_times,
                "delayLevel": m.properties.get("DELAY"), "realTopic": m.properties.get("REAL_TOPIC"),
                "msgId": m.msg_id}
    copies = []
    ids = {original.msg_id}  # a copy of a copy names either one as its origin: follow the chain
    for m in units:
        if m is original or m.commit_log_offset < original.commit_log_offset:
            continue
        p = m.properties
        if p.get("ORIGIN_MESSAGE_ID") in ids or (uniq and p.get("UNIQ_KEY") == uniq and "RETRY_TOPIC" in p):
            ids.add(m.msg_id)
            t = p.get("REAL_TOPIC") if m.topic == "SCHEDULE_TOPIC_XXXX" else m.topic
            kind = ("scheduled retry" if m.topic == "SCHEDULE_TOPIC_XXXX" else "retry" if m.topic.startswith("%RETRY%")
                    else "dead letter" if m.topic.startswith("%DLQ%") else "copy")
            r = row(m, kind)
            r["group"] = (t or "").split("%", 2)[-1] if (t or "").startswith(("%RETRY%", "%DLQ%")) else None
            copies.append(r)
    cfg = os.path.join(root, "config")
    groups = []
    saved = _read_json(os.path.join(cfg, "consumerOffset.json"))
    offsets = {}
    for key, queues in (saved.get("offsetTable") or {}).items():
        if isinstance(queues, dict):
            offsets[key] = {int(q): int(o) for q, o in queues.items() if str(q).lstrip("-").isdigit()}
    # Kafka commits journaled since that file was written (what the broker replays on start)
    gen = saved.get("journalGeneration", 0)
    offset_journal.replay(cfg, offsets, gen if isinstance(gen, int) else 0)
    for key, queues in sorted(offsets.items()):
        t, _, g = key.partition("@")
        if t != original.topic or not isinstance(queues, dict):
            continue
        committed = queues.get(original.queue_id)
        if committed is None:
            continue
        groups.append({"group": g, "kind": "offset", "committedOffset": int(committed),
                       "state": "consumed" if int(committed) > original.queue_offset else "not consumed yet"})
    share = _read_json(os.path.join(cfg, "kafkaShareGroups.json")).get("groups", {})
    for g, gd in sorted(share.items()):
        sp = (gd.get("partitions") or {}).get(f"{original.topic}:{original.queue_id}")
        if not isinstance(sp, dict):
            continue
        rec = (sp.get("records") or {}).get(str(original.queue_offset))
        if rec is not None:
            state, count = _SHARE_STATE_NAMES.get(rec[0], str(rec[0])), rec[1]
        elif original.queue_offset < sp.get("start", 0):
            state, count = "Acknowledged or Archived (below the start offset)", None
        else:
            state, count = "not delivered yet", 0
        groups.append({"group": g, "kind": "share", "startOffset": sp.get("start"), "state": state,
                       "deliveryCount": count})
    return {"store": os.path.abspath(root), "message": row(original, "original"), "uniqKey": uniq,
            "copies": copies, "groups": groups, "problems": []}


def render_history(rep: dict) -> str:
    m = rep["message"]
    lines = [f"store {rep['store']}",
             f"message {m['topic']} queue {m['queueId']} offset {m['queueOffset']}  msgId {m['msgId']}"
             + (f"  client msgId {rep['uniqKey']}" if rep.get("uniqKey") else "") + f"  stored {m['storeTime']}"]
    lines.append(f"copies made by the broker ({len(rep['copies'])}):")
    for c in rep["copies"]:
        lines.append(f"  {c['kind']:<16} {c['topic']} queue {c['queueId']} offset {c['queueOffset']}  "
                     f"reconsumeTimes {c['reconsumeTimes']}" + (f"  delay level {c['delayLevel']}" if c["delayLevel"] else "")
                     + f"  stored {c['storeTime']}")
    lines.append(f"groups ({len(rep['groups'])}):")
    for g in rep["groups"]:
        if g["kind"] == "share":
            lines.append(f"  share group  {g['group']}: {g['state']}"
                         + (f", delivery count {g['deliveryCount']}" if g["deliveryCount"] is not None else "")
                         + f" (start offset {g['startOffset']})")
        else:
            lines.append(f"  offset group {g['group']}: {g['state']} (committed offset {g['committedOffset']})")
    return "\n".join(lines)
