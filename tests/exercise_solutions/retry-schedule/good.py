DEFAULT_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_levels(levels):
    return [float(x[:-1]) * UNIT[x[-1]] for x in levels.split()]


def next_step(reconsume_times, max_reconsume_times=16, levels=DEFAULT_LEVELS):
    if reconsume_times >= max_reconsume_times:
        return ("DLQ", None)
    lv = parse_levels(levels)
    return ("RETRY", lv[min(3 + reconsume_times, len(lv)) - 1])
