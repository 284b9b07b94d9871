"""StoreCheckpoint and the abort marker: what a restart reads to choose normal or abnormal recovery (SPEC §2).

The checkpoint file is one 4 KiB page: physicMsgTimestamp (8), logicsMsgTimestamp (8),
indexMsgTimestamp (8) at RocketMQ 4.x's offsets, then masterFlushedOffset (8) and
confirmPhyOffset (8) at the offsets RocketMQ 5.x added. This store writes the commitlog's end
offset into confirmPhyOffset on a clean shutdown so a normal restart need not scan the log.
"""
from __future__ import annotations

import mmap
import os
import struct

from .mapped_file import StoreError, reserve_blocks

_LAYOUT = struct.Struct(">qqqqq")
CHECKPOINT_SIZE = 4096


class StoreCheckpoint:
    def __init__(self, path: str):
        self.path = path
        exists = os.path.exists(path)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            if not exists or os.fstat(fd).st_size < CHECKPOINT_SIZE:
                os.ftruncate(fd, CHECKPOINT_SIZE)
            try:  # an unallocated page of the mapping is a SIGBUS on a full disk (tmpfs: even to read)
                reserve_blocks(fd, 0, CHECKPOINT_SIZE)
            except OSError as exc:
                raise StoreError(f"{path}: cannot allocate the checkpoint page: {exc.strerror or exc} "
                                 f"(free some space on that disk)") from None
            self.mm = mmap.mmap(fd, CHECKPOINT_SIZE)
        finally:
            os.close(fd)
        (self.physic_msg_timestamp, self.logics_msg_timestamp, self.index_msg_timestamp,
         self.master_flushed_offset, self.confirm_phy_offset) = _LAYOUT.unpack_from(self.mm, 0)

    @property
    def min_timestamp(self) -> int:
        """StoreCheckpoint.getMinTimestamp: min of physic and logics, less 3 s of slack."""
        m = min(self.physic_msg_timestamp, self.logics_msg_timestamp) - 3000
        return max(m, 0)

    @property
    def min_timestamp_index(self) -> int:
        return min(self.min_timestamp, self.index_msg_timestamp)

    def flush(self) -> None:
        _LAYOUT.pack_into(self.mm, 0, self.physic_msg_timestamp, self.logics_msg_timestamp,
                          self.index_msg_timestamp, self.master_flushed_offset, self.confirm_phy_offset)
        self.mm.flush()

    def close(self) -> None:
        self.flush()
        self.mm.close()


def current_boot_id() -> str:
    """This kernel boot's id (Linux /proc/sys/kernel/random/boot_id), "" where there is none."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            return f.read().strip()
    except OSError:
        return ""


def create_abort_file(root: str) -> None:
    """The abort marker holds the boot id of the kernel the store runs under: a restart that finds
    the marker with the same boot id knows only the process died (kill -9, a crash), not the
    machine, so every byte the process wrote into its mappings is still in the page cache."""
    path = os.path.join(root, "abort")
    try:
        with open(path, "wb") as f:
            f.write(current_boot_id().encode("ascii"))
    except OSError as exc:
        raise StoreError(f"{path}: cannot write the abort marker: {exc.strerror or exc} "
                         f"(free some space on that disk)") from None


def abort_file_boot_id(root: str) -> str:
    """The boot id recorded in the abort marker ("" when absent, empty or unreadable)."""
    try:
        with open(os.path.join(root, "abort"), "rb") as f:
            return f.read(64).decode("ascii", "replace").strip()
    except OSError:
        return ""


def abort_file_exists(root: str) -> bool:
    return os.path.exists(os.path.join(root, "abort"))


def delete_abort_file(root: str) -> None:
    try:
        os.unlink(os.path.join(root, "abort"))
    except FileNotFoundError:
        pass
