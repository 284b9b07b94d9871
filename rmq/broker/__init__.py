"""Broker services: topics, offsets, long polling, schedule, retry/DLQ, transactions. Uses the
store and rmq.common; knows no wire format (the remoting processors and listener are rmq.server)."""
