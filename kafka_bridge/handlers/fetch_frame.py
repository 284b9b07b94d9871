"""Fetch straight from the request frame: the common Fetch read and answered without the generic codec (issue 24).

Under a steady load most of a broker's requests are Fetch requests woken by new records: each one
was decoded into a dict per topic and partition (and a UUID per topic id), handled, and its answer
encoded from dicts again, which cost the event loop more than reading the records. For the common
request this module takes the frame as it came in:

1. `rmq._native.kafka_fetch_parse` reads the body (v4..v16) into tuples: the topics (names, or
   the topic ids' 16 bytes), and per partition its fetch offset and byte budget;
2. topic ids are looked up by their bytes (KafkaBridge.topic_by_raw_id);
3. `handlers.fetch.fetch_layout`, the loop handle_fetch runs, reads the partitions and long-polls;
4. `rmq._native.kafka_fetch_response` writes the whole response frame from its entries.

The entries are handle_fetch's, and the response bytes are what the generated encoder writes for
them (tests/test_fetch_frame.py compares the two paths over request shapes, truncated and mutated
frames included). Anything less common is declined and goes to the decoder, the authorizer and
handle_fetch: no C extension, ACLs (Kafka's or plain_acl.yml), a cluster of Kafka nodes, or a
request the C reader leaves to the codec (malformed, tagged fields, forgotten topics of a fetch
session, a replica's fetch, a non-ASCII rack id).
"""
from __future__ import annotations

from rmq import native

from .. import authorizer
from ..protocol import error_codes as ec
from .fetch import fetch_layout

MIN_VERSION, MAX_VERSION = 4, 16


class Declined(Exception):
    """This request goes to the decoder and handle_fetch."""


async def handle_frame(bridge, conn, header, frame, offset: int) -> bytes:
    """The whole response frame to this Fetch request, or Declined when handle_fetch must take it."""
    version = header.api_version
    if not MIN_VERSION <= version <= MAX_VERSION or native.ext is None or bridge.cluster is not None \
            or authorizer._policy(bridge, conn) is not None:
        raise Declined
    parsed = native.ext.kafka_fetch_parse(frame, offset, version)
    if parsed is None:
        raise Declined
    max_wait_ms, min_bytes, max_bytes, isolation, topics = parsed
    layout = []
    if version >= 13:
        by_raw_id = bridge.topic_by_raw_id
        for raw, parts in topics:
            layout.append((raw, by_raw_id(raw), [(p, off, pmax, p, ec.NONE) for p, off, pmax in parts]))
    else:
        for name, parts in topics:
            layout.append((name, name, [(p, off, pmax, p, ec.NONE) for p, off, pmax in parts]))
    entries = await fetch_layout(bridge, layout, max_wait_ms, min_bytes, max_bytes, isolation)
    return native.ext.kafka_fetch_response(version, header.correlation_id,
                                           [(key, parts) for (key, _, _), parts in zip(layout, entries)], 0, ec.NONE, 0)


__all__ = ["Declined", "MAX_VERSION", "MIN_VERSION", "handle_frame"]
