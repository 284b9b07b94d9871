"""rmq.common: what both sides of the wire share, as rocketmq-common does: the message model and its
properties (rmq.common.message), Java String.hashCode (rmq.common.jhash) and the filter expressions
with tag parsing (rmq.common.filter). It imports nothing else of rmq, so the client library, the
broker and the store all build on it without dragging each other in."""
