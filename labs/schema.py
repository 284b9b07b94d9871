"""What a lab file may say, as pydantic models: loading validates every key and type, and an error
names the file, the key and what was expected (labs.load_lab turns pydantic's errors into that).

A lab holds the question, where it comes from (seed file and section), the claim, the systems, an
OpenMessaging Benchmark workload, the sweep, the metrics and the rule that turns measurements into a
verdict. A bare OMB workload file (the keys of io.openmessaging.benchmark.Workload) is a Workload.
"""
from __future__ import annotations

import re
from enum import Enum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

_CJK = r"\u3000-\u303f\u3400-\u9fff\uff00-\uffef"
_FOLDED = re.compile(rf"(?<=[{_CJK}])[ \t\n]+(?=[{_CJK}])")


def unfold_cjk(text: str) -> str:
    """A YAML folded block (>) joins its lines with a space, which Chinese does not put between
    characters: drop whitespace that stands between two CJK characters (or CJK punctuation)."""
    return _FOLDED.sub("", text)


SYSTEMS = ("rocketmq", "rocketmq-cpp", "kafka-bridge", "kafka-log", "tansu", "docker-kafka", "docker-rocketmq")
KAFKA_PROTOCOL_SYSTEMS = ("kafka-bridge", "kafka-log", "tansu", "docker-kafka")


class KeyDistributor(str, Enum):
    NO_KEY = "NO_KEY"
    KEY_ROUND_ROBIN = "KEY_ROUND_ROBIN"
    RANDOM_NANO = "RANDOM_NANO"


class Workload(BaseModel):
    """io.openmessaging.benchmark.Workload: the same keys mean the same things."""
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    name: str = "workload"
    topics: int = Field(1, ge=1)
    partitionsPerTopic: int = Field(1, ge=1)
    keyDistributor: KeyDistributor = KeyDistributor.NO_KEY
    messageSize: int = Field(1024, ge=1)
    useRandomizedPayloads: bool = False
    randomBytesRatio: float = Field(0.0, ge=0.0, le=1.0)
    randomizedPayloadPoolSize: int = Field(0, ge=0)
    payloadFile: str | None = None
    subscriptionsPerTopic: int = Field(1, ge=0)
    producersPerTopic: int = Field(1, ge=1)
    consumerPerSubscription: int = Field(1, ge=0)
    messageRateReceivedForSubscription: int = 100
    producerRate: int = Field(0, ge=0, description="messages/s over all producers; 0 = as fast as possible")
    producerStartRate: int = 10000
    acceptableBacklog: int = 10000
    producerIncrementRate: int = 0
    producerIncrementSeconds: int = 60
    consumerBacklogSizeGB: float = Field(0, ge=0)
    producerPauseBeforeDrain: int = 0
    producerPauseDuringDrain: int = 0
    testDurationMinutes: float = Field(15, gt=0)
    warmupDurationMinutes: float = Field(1, ge=0)


class Source(BaseModel):
    model_config = ConfigDict(extra="forbid")
    seed: str = Field(description="the seed file under ../shared/seeds/ (e.g. 003)")
    section: str


class SystemSpec(BaseModel):
    """A system and, optionally, broker config keys for it (e.g. flushDiskType: SYNC_FLUSH)."""
    model_config = ConfigDict(extra="forbid")
    system: Literal[SYSTEMS]  # type: ignore[valid-type]
    label: str | None = None
    config: dict[str, str | int | float | bool] = Field(default_factory=dict)
    producer: dict[str, str | int | float | bool] = Field(default_factory=dict, description="producer client settings")
    consumer: dict[str, str | int | float | bool] = Field(
        default_factory=dict, description="consumer settings a driver reads (e.g. allocateStrategy, consumeMode, "
                                          "partition.assignment.strategy)")

    @property
    def name(self) -> str:
        return self.label or self.system


class Verdict(BaseModel):
    """How the measurements become a verdict.

    Every point is measured several times; a system's figure is the median of its repeats and its
    spread the repeats' range (min-max). kind falloff: for each system, metric at the last sweep point
    / at the first (per repeat); the claim is about `expect_best` keeping more of it. kind higher /
    lower: at every sweep point, is `expect_best`'s metric the highest (lowest)? `against` narrows the
    comparison to some systems (the others are shown for reference). A comparison is decided only
    when the two ranges do not overlap and the medians differ by at least `min_effect` of the larger;
    otherwise it is inconclusive (labs.verdict)."""
    model_config = ConfigDict(extra="forbid")
    metric: str
    kind: Literal["falloff", "higher", "lower"]
    expect_best: str
    against: list[str] = Field(default_factory=list, description="systems expect_best is compared with; "
                                                                  "empty = all the others")
    explain: str = Field(description="the mechanism, in a sentence or two, that the report shows beside the numbers")
    explain_zh: str = Field("", description="the same in Chinese")
    min_effect: float = Field(0.10, ge=0.0, lt=1.0,
                              description="the smallest difference the claim is about, as a fraction of the larger "
                                          "value (0.10 = 10%): a smaller one is inconclusive, however steady")


class Conditions(BaseModel):
    """Conditions an OMB lab sets for itself and reports (labs/conditions.py), each skipped with its
    reason where the machine does not allow it (not root, controller missing, no loop device)."""
    model_config = ConfigDict(extra="forbid")

    producerProcesses: int = Field(0, ge=0, le=16, description="send from this many client processes, each "
                                                                "with its own producer over its share of the "
                                                                "topics; 0 = the runner's own thread")
    consumerProcesses: bool = Field(False, description="read each subscription in a client process of its own "
                                                       "(its consumers are threads there); false = threads in "
                                                       "the runner")
    brokerMemoryMB: int | None = Field(None, ge=64, description="memory.limit_in_bytes of a cgroup v1 memory "
                                                                 "cgroup holding the broker: its page cache included")
    diskWriteIops: int | None = Field(None, ge=1, description="blkio write IOPS cap on a loop device holding the "
                                                               "broker's data directory")
    diskWriteMBps: float | None = Field(None, gt=0, description="blkio write bandwidth cap (MB/s) on that device")
    diskSizeMB: int = Field(8192, ge=256, description="size of the loop device's (sparse) backing file")


class Lab(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    title: str
    question: str
    source: Source
    claim: str
    title_zh: str = Field("", description="the title, question and claim in Chinese (rmq lab show --lang zh)")
    question_zh: str = ""
    claim_zh: str = ""
    systems: list[SystemSpec] = Field(min_length=1)
    driver: Literal["omb", "filter", "lookup", "delay", "retry", "broadcast", "transactions", "rebalance", "ordered",
                    "cleanup", "compaction", "share-groups"] = "omb"
    workload: Workload
    params: dict[str, int | float | str] = Field(default_factory=dict, description="settings of a driver other than omb")
    sweep: dict[str, list[int | float | str]] = Field(default_factory=dict)
    quick: dict = Field(default_factory=dict, description="overrides for --quick: workload keys, params, sweep "
                                                          "and shareBroker")
    shareBroker: bool = Field(False, description="one broker process serves every point and repeat of the systems "
                                                 "that start the same process (same kind, same config), one after "
                                                 "the other, instead of a fresh process and data directory per "
                                                 "point; for drivers that name their topics and groups afresh each "
                                                 "time (not with conditions)")
    metrics: list[str] = Field(default_factory=lambda: ["publishRate", "consumeRate"])
    mechanism: list[str] = Field(default_factory=list,
                                 description="the mechanism figures the explanation names (files_written, "
                                             "fsyncs, ...): the report tabulates and plots these and no others")
    repeats: int | None = Field(None, ge=1, le=50, description="measurements per point and system (default: 5, "
                                                                 "or 3 with --quick)")
    conditions: Conditions = Field(default_factory=Conditions,
                                   description="machine conditions the lab sets (OMB driver): producer processes, a "
                                               "memory cgroup for the broker, a throttled disk")
    verdict: Verdict | None = Field(description="the rule that decides the claim; null for a workload without one")

    @field_validator("systems", mode="before")
    @classmethod
    def _systems(cls, v):
        return [{"system": s} if isinstance(s, str) else s for s in (v or [])]

    @field_validator("sweep")
    @classmethod
    def _sweep(cls, v, info):
        params = info.data.get("params") or {}
        for key, values in v.items():
            if key not in Workload.model_fields and key not in params:
                raise ValueError(f"sweep key {key!r} is not a workload key or one of the lab's params (expected one "
                                 f"of {', '.join(sorted(Workload.model_fields) + sorted(params))})")
            if not values:
                raise ValueError(f"sweep {key}: expected at least one value")
        if len(v) > 1:
            raise ValueError("a lab sweeps one workload key (got " + ", ".join(v) + ")")
        return v

    @model_validator(mode="after")
    def _verdict_names_a_system(self):
        names = [s.name for s in self.systems]
        if len(set(names)) != len(names):
            raise ValueError(f"systems: two systems have the same label ({', '.join(names)}); give each a label")
        if self.verdict is None:
            return self
        if self.verdict.expect_best not in names:
            raise ValueError(f"verdict.expect_best {self.verdict.expect_best!r} is not one of the systems "
                             f"({', '.join(names)})")
        for other in self.verdict.against:
            if other not in names or other == self.verdict.expect_best:
                raise ValueError(f"verdict.against: {other!r} is not one of the other systems ({', '.join(names)})")
        return self
