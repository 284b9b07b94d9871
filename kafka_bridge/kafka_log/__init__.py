"""Kafka's log layout as a second storage design for the Kafka listener (issue 14): see manager.py."""
from .log import AppendError, LogConfig, PartitionLog
from .manager import KafkaLogManager

__all__ = ["AppendError", "KafkaLogManager", "LogConfig", "PartitionLog"]
