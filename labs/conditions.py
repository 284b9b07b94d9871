"""Machine conditions a lab sets for itself (seed 003's topic-count test, run on 2017 servers whose
page cache could not hold every partition's files and whose disks turned scattered writes into
lost throughput): a bounded page cache for the broker (a cgroup v1 memory cgroup), a disk with a
write IOPS or bandwidth cap (a loop device under blkio throttling), and the figures that show the
mechanism beside the rates (the disk's write requests from /proc/diskstats, the cgroup's dirty and
writeback bytes). Every condition is set or skipped, and a skipped one carries its reason.

Producer and consumer processes are run by the OMB driver (labs/omb.py); this module only records
them. cgroup v1 charges the kernel's writeback of buffered writes to the root blkio cgroup,
not to the writer's, so the disk cap is written twice: in the broker's own blkio cgroup (its fsync
and direct I/O) and in the root cgroup for the loop device alone (the flusher threads' writeback).
Both rules name only the loop device this module created, and both are removed on teardown.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
import uuid

from .schema import Conditions

CGROUP_ROOT = "/sys/fs/cgroup"


def _write(path: str, value: str) -> None:
    with open(path, "w", encoding="ascii") as fh:
        fh.write(value)


def _read(path: str) -> str:
    with open(path, encoding="ascii") as fh:
        return fh.read()


def own_cgroup(controller: str, proc_cgroup: str = "/proc/self/cgroup") -> str:
    """This process's cgroup path in a v1 hierarchy ('/' when at the root or not listed)."""
    try:
        for line in _read(proc_cgroup).splitlines():
            _, ctrls, path = line.split(":", 2)
            if controller in ctrls.split(","):
                return path or "/"
    except OSError:
        pass
    return "/"


def diskstats(dev_name: str) -> dict:
    """The write counters of one block device from /proc/diskstats (sectors are 512 bytes)."""
    try:
        for line in _read("/proc/diskstats").splitlines():
            f = line.split()
            if len(f) >= 11 and f[2] == dev_name:
                return {"writes": int(f[7]), "write_merges": int(f[8]), "write_sectors": int(f[9]),
                        "write_ms": int(f[10])}
    except OSError:
        pass
    return {}


def memcg_stat(path: str) -> dict:
    out = {}
    try:
        for line in _read(os.path.join(path, "memory.stat")).splitlines():
            k, _, v = line.partition(" ")
            if k in ("cache", "dirty", "writeback", "rss"):
                out[k] = int(v)
        out["failcnt"] = int(_read(os.path.join(path, "memory.failcnt")))
        out["max_usage"] = int(_read(os.path.join(path, "memory.max_usage_in_bytes")))
    except (OSError, ValueError):
        pass
    return out


class LabConditions:
    """Set up a lab's conditions once for the run; attach each broker process as it starts; sample
    the figures around each measured phase; tear everything down (also after a failure)."""

    def __init__(self, cond: Conditions, cgroup_root: str = CGROUP_ROOT) -> None:
        self.cond = cond
        self.cgroup_root = cgroup_root
        self.report: list[dict] = []          # {condition, status: set|skipped, detail|reason}
        self.data_root: str | None = None     # where the systems' data directories go (the loop mount)
        self.memcg: str | None = None
        self.blkcg: str | None = None
        self.loop_dev: str | None = None
        self._backing: str | None = None
        self._tmp: str | None = None
        self._root_rules: list[str] = []      # root blkio files holding our rule (removed on teardown)
        self._majmin = ""
        self._tag = f"rmq-lab-{os.getpid()}-{uuid.uuid4().hex[:6]}"

    # ---- setup ---------------------------------------------------------------------------------
    def _skip(self, name: str, reason: str) -> None:
        self.report.append({"condition": name, "status": "skipped", "reason": reason})

    def _set(self, name: str, detail: str) -> None:
        self.report.append({"condition": name, "status": "set", "detail": detail})

    def _why_not_root(self, controller: str) -> str | None:
        if os.geteuid() != 0:
            return "needs root (cgroups and loop devices are the administrator's)"
        ctl = os.path.join(self.cgroup_root, controller)
        probe = "memory.limit_in_bytes" if controller == "memory" else "blkio.throttle.write_iops_device"
        if not os.path.exists(os.path.join(ctl, probe)):
            return f"the cgroup v1 {controller} controller is not mounted at {ctl}"
        return None

    def setup(self) -> "LabConditions":
        c = self.cond
        if c.producerProcesses:
            self._set("producer processes", f"{c.producerProcesses} client processes, each its own producer")
        if c.consumerProcesses:
            self._set("consumer processes", "each subscription read in a client process of its own")
        if c.brokerMemoryMB:
            self._setup_memory(c.brokerMemoryMB)
        if c.diskWriteIops or c.diskWriteMBps:
            self._setup_disk()
        return self

    def _setup_memory(self, mb: int) -> None:
        name = "bounded page cache"
        why = self._why_not_root("memory")
        if why:
            return self._skip(name, why)
        parent = os.path.join(self.cgroup_root, "memory", own_cgroup("memory").lstrip("/"))
        path = os.path.join(parent, self._tag)
        try:
            os.mkdir(path)
            _write(os.path.join(path, "memory.limit_in_bytes"), str(mb << 20))
        except OSError as exc:
            self._rmdir(path)
            return self._skip(name, f"cannot create a memory cgroup under {parent} ({exc.strerror})")
        self.memcg = path
        self._set(name, f"the broker in its own cgroup v1 memory cgroup ({self._tag}, below the runner's), "
                        f"memory.limit_in_bytes {mb} MiB: its RSS and its page cache")

    def _setup_disk(self) -> None:
        name = "throttled disk"
        c = self.cond
        why = self._why_not_root("blkio")
        if why:
            return self._skip(name, why)
        for tool in ("losetup", "mkfs.ext4", "mount", "umount"):
            if shutil.which(tool) is None:
                return self._skip(name, f"{tool} is not installed")
        self._tmp = tempfile.mkdtemp(prefix=self._tag + "-")
        self._backing = os.path.join(self._tmp, "disk.img")
        mnt = os.path.join(self._tmp, "mnt")
        os.mkdir(mnt)
        try:
            with open(self._backing, "wb") as fh:
                fh.truncate(c.diskSizeMB << 20)
            self.loop_dev = subprocess.run(["losetup", "-f", "--show", self._backing], capture_output=True, text=True,
                                           check=True, timeout=30).stdout.strip()
            subprocess.run(["mkfs.ext4", "-q", "-F", "-E", "lazy_itable_init=1,lazy_journal_init=1", self.loop_dev],
                           capture_output=True, text=True, check=True, timeout=120)
            subprocess.run(["mount", self.loop_dev, mnt], capture_output=True, text=True, check=True, timeout=30)
        except (OSError, subprocess.SubprocessError) as exc:
            err = getattr(exc, "stderr", "") or str(exc)
            self._teardown_disk()
            return self._skip(name, f"cannot set up a loop device ({str(err).strip().splitlines()[-1][:160]})")
        self.data_root = mnt
        rdev = os.stat(self.loop_dev).st_rdev
        self._majmin = f"{os.major(rdev)}:{os.minor(rdev)}"
        rules = []
        if c.diskWriteIops:
            rules.append(("blkio.throttle.write_iops_device", str(c.diskWriteIops)))
        if c.diskWriteMBps:
            rules.append(("blkio.throttle.write_bps_device", str(int(c.diskWriteMBps * 1_000_000))))
        blk_root = os.path.join(self.cgroup_root, "blkio")
        path = os.path.join(blk_root, self._tag)
        try:
            os.mkdir(path)
            self.blkcg = path
            for f, v in rules:
                _write(os.path.join(path, f), f"{self._majmin} {v}")
                _write(os.path.join(blk_root, f), f"{self._majmin} {v}")
                self._root_rules.append(os.path.join(blk_root, f))
        except OSError as exc:
            self._teardown_disk()
            return self._skip(name, f"cannot write a blkio throttle rule ({exc.strerror})")
        caps = ", ".join(([f"{c.diskWriteIops} write IOPS"] if c.diskWriteIops else []) +
                         ([f"{c.diskWriteMBps:g} MB/s written"] if c.diskWriteMBps else []))
        self._set(name, f"data directories on ext4 on {self.loop_dev} ({self._majmin}, {c.diskSizeMB} MiB sparse "
                        f"file), capped at {caps} by blkio throttling")

    # ---- per broker --------------------------------------------------------------------------------
    def attach(self, pid: int) -> None:
        """Move a started broker into the lab's cgroups (its threads follow it)."""
        for cg in (self.memcg, self.blkcg):
            if cg:
                _write(os.path.join(cg, "cgroup.procs"), str(pid))

    def sample(self) -> dict:
        out = {"t": time.monotonic()}
        if self.loop_dev:
            out["disk"] = diskstats(os.path.basename(self.loop_dev))
        if self.memcg:
            out["memcg"] = memcg_stat(self.memcg)
        return out

    def dirty_now(self) -> tuple[int, int] | None:
        """(dirty, writeback) bytes of the broker's memory cgroup, or None without one."""
        if not self.memcg:
            return None
        s = memcg_stat(self.memcg)
        return s.get("dirty", 0), s.get("writeback", 0)

    def figures(self, before: dict, after: dict) -> dict:
        """The disk's and the cgroup's share of the mechanism over one measured phase."""
        out: dict = {}
        secs = max(1e-6, after["t"] - before["t"])
        d0, d1 = before.get("disk") or {}, after.get("disk") or {}
        if d0 and d1:
            writes = d1["writes"] - d0["writes"]
            merges = d1["write_merges"] - d0["write_merges"]
            nbytes = (d1["write_sectors"] - d0["write_sectors"]) * 512
            out.update({"disk_write_iops": round(writes / secs, 1), "disk_write_MBps": round(nbytes / secs / 1e6, 2),
                        "disk_kb_per_write": round(nbytes / writes / 1024, 1) if writes else 0,
                        "disk_write_merge_share": round(merges / (writes + merges), 3) if writes + merges else 0})
        m1 = after.get("memcg") or {}
        if m1:
            out.update({"cgroup_page_cache_bytes": m1.get("cache", 0), "cgroup_limit_hits": m1.get("failcnt", 0) -
                        (before.get("memcg") or {}).get("failcnt", 0)})
        return out

    # ---- teardown ------------------------------------------------------------------------------
    @staticmethod
    def _rmdir(path: str | None) -> None:
        if not path:
            return
        for _ in range(50):               # a process that just exited may still be listed for a moment
            try:
                os.rmdir(path)
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.1)

    def _teardown_disk(self) -> None:
        for f in self._root_rules:
            try:
                _write(f, f"{self._majmin} 0")
            except OSError:
                pass
        self._root_rules = []
        self._rmdir(self.blkcg)
        self.blkcg = None
        if self.data_root:
            subprocess.run(["umount", self.data_root], capture_output=True, timeout=120)
            if os.path.ismount(self.data_root):
                subprocess.run(["umount", "-l", self.data_root], capture_output=True, timeout=30)
            self.data_root = None
        if self.loop_dev:
            subprocess.run(["losetup", "-d", self.loop_dev], capture_output=True, timeout=30)
            self.loop_dev = None
        if self._tmp:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    def teardown(self) -> None:
        # the root rules first: writeback still queued for the device must not stay throttled
        self._teardown_disk()
        self._rmdir(self.memcg)
        self.memcg = None

    def __enter__(self) -> "LabConditions":
        return self.setup()

    def __exit__(self, *exc) -> None:
        self.teardown()
