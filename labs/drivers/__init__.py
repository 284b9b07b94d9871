"""Lab drivers other than OMB's workload: experiments that need a RocketMQ feature on one side and the
way a Kafka user does the same thing on the other. Importing the package registers every driver."""
from . import cleanup, compaction, features, ordered, rebalance, share_groups, transactions  # noqa: F401  (each registers its drivers)
from .common import DRIVERS

__all__ = ["DRIVERS"]
