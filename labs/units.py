"""The unit of each figure a lab reports (msgs/s, ms, bytes, ...): the report's column headings and plot
axes, and labs.starvation's test of whether a figure depends on timing."""
from __future__ import annotations

# units of the figures the labs report; a figure not named here is a count
_UNITS = {"publishRateAvg": "msgs/s", "consumeRateAvg": "msgs/s", "backlogDrainRate": "msgs/s",
          "transactionsPerSecond": "tx/s", "wireBytesPerMatch": "B", "wireBytes": "B", "storeBytes": "bytes",
          "deliveriesPerMessage": "per msg", "messagesReadPerLookup": "msgs", "messages_per_fsync": "msgs",
          "payload_bytes_per_file_written": "bytes", "bytes_written_to_disk": "bytes", "dirty_bytes_peak": "bytes",
          "writeback_bytes_end": "bytes", "peak_rss_bytes": "bytes", "assignmentSpread": "queues",
          "disk_write_iops": "writes/s", "disk_write_MBps": "MB/s", "disk_kb_per_write": "KiB",
          "cgroup_page_cache_bytes": "bytes", "cgroup_dirty_bytes_peak": "bytes", "cgroup_writeback_bytes_peak": "bytes",
          "broker_cpu_us_per_msg": "µs/msg", "runner_cpu_us_per_msg": "µs/msg", "producers_cpu_us_per_msg": "µs/msg",
          "consumers_cpu_us_per_msg": "µs/msg"}


def unit(metric: str) -> str:
    if metric in _UNITS:
        return _UNITS[metric]
    low = metric.lower()
    if "latency" in low or "Ms" in metric:
        return "ms"
    if low.endswith("seconds"):
        return "s"
    if low.endswith("rate"):
        return "msgs/s"
    return ""
