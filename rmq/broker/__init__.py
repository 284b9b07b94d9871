"""Broker services: topics, offsets, long polling, schedule, retry/DLQ, transactions, filters."""
