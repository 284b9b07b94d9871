"""Exercise retry-schedule: fill in `parse_levels` and `next_step` (see task.md)."""

DEFAULT_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"


def parse_levels(levels: str) -> list[float]:
    """messageDelayLevel as seconds: "1s 5s 1m 2h" -> [1.0, 5.0, 60.0, 7200.0].
    Units: s, m, h, d. Level n (1-based) is element n-1."""
    raise NotImplementedError


def next_step(reconsume_times: int, max_reconsume_times: int = 16, levels: str = DEFAULT_LEVELS):
    """A concurrent listener just failed (RECONSUME_LATER) on a message that had already been
    re-delivered `reconsume_times` times. Where does the broker put it?

    Return ("RETRY", seconds until it is delivered again) or ("DLQ", None)."""
    raise NotImplementedError
