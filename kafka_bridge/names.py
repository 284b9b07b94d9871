"""Kafka's topic-name rules (org.apache.kafka.common.internals.Topic.validate), applied to every
name a Kafka client asks to create (CreateTopics, auto-creation by Metadata). Sans-IO.

Kafka allows [a-zA-Z0-9._-], 1 to 249 characters, not "." or "..". RocketMQ's names are wider
('%' and '|', used by %RETRY% and %DLQ% topics) and shorter in its clients (127): the store takes
both (rmq.store.message_store.validate_topic), so a name is checked against the protocol that creates it.
The '.'/'_' collision rule is the broker's (TopicConfigManager.collision), on every creation path.
"""
from __future__ import annotations

import re

MAX_NAME_LENGTH = 249
_LEGAL = re.compile(r"^[a-zA-Z0-9._-]+$")


def kafka_topic_error(name: str | None) -> str | None:
    """Why Kafka refuses `name` as a topic name (its wording), or None."""
    if not name:
        return "Topic name is illegal, it can't be empty"
    if name in (".", ".."):
        return 'Topic name cannot be "." or ".."'
    if len(name) > MAX_NAME_LENGTH:
        return (f"Topic name is illegal, it can't be longer than {MAX_NAME_LENGTH} characters, "
                f"topic name: {name}")
    if not _LEGAL.match(name):
        return (f'Topic name "{name}" is illegal, it contains a character other than ASCII alphanumerics, '
                "'.', '_' and '-'")
    return None
