"""The schema model for Kafka messages: Field and Api, the vocabulary of messages.py (SPEC §11).

A Field mirrors one entry of a Kafka message JSON file (name, type, versions,
nullableVersions, taggedVersions/tag, default, nested fields); names are snake_case.
"""

from __future__ import annotations

import uuid

MAX_VERSION = 0x7FFF

PRIMITIVE_TYPES = frozenset({
    "bool", "int8", "int16", "uint16", "int32", "int64", "float64",
    "string", "bytes", "records", "uuid",
})

ZERO_UUID = uuid.UUID(int=0)

_MISSING = object()


def parse_versions(spec: str | None) -> tuple[int, int] | None:
    """Turn a Kafka version spec ("3+", "0-12", "7", "none") into an inclusive (lo, hi)."""
    if spec is None or spec == "none":
        return None
    if spec.endswith("+"):
        return int(spec[:-1]), MAX_VERSION
    if "-" in spec:
        lo, hi = spec.split("-", 1)
        return int(lo), int(hi)
    return int(spec), int(spec)


def _in(rng: tuple[int, int] | None, version: int) -> bool:
    return rng is not None and rng[0] <= version <= rng[1]


class Field:
    """One field of a message or nested struct, as in Kafka's JSON message definitions."""

    __slots__ = ("name", "type", "versions", "nullable", "tagged", "tag", "fields",
                 "elem", "is_array", "is_struct", "explicit_default")

    def __init__(self, name: str, type: str, versions: str, nullable: str | None = None,
                 tagged: str | None = None, tag: int | None = None, default=_MISSING,
                 fields: list[Field] | None = None):
        self.name = name
        self.type = type
        self.versions = parse_versions(versions)
        self.nullable = parse_versions(nullable)
        self.tagged = parse_versions(tagged)
        self.tag = tag
        self.fields = fields
        self.is_array = type.startswith("[]")
        self.elem = type[2:] if self.is_array else type
        self.is_struct = fields is not None
        self.explicit_default = default
        if self.is_struct == (self.elem in PRIMITIVE_TYPES):
            raise ValueError(f"field {name}: type {type} and nested fields disagree")
        if (self.tagged is None) != (tag is None):
            raise ValueError(f"field {name}: tag and taggedVersions go together")

    def present(self, version: int) -> bool:
        return _in(self.versions, version)

    def nullable_in(self, version: int) -> bool:
        return _in(self.nullable, version)

    def tagged_in(self, version: int) -> bool:
        return _in(self.tagged, version)

    def default(self):
        """A fresh default value (Kafka's rules: 0, "", b"", [], zero UUID, default struct)."""
        if self.explicit_default is not _MISSING:
            return self.explicit_default
        if self.is_array:
            return []
        if self.is_struct:
            return {f.name: f.default() for f in self.fields}
        return TYPE_DEFAULTS[self.type]

    def __repr__(self) -> str:
        return f"Field({self.name!r}, {self.type!r})"


F = Field

TYPE_DEFAULTS = {
    "bool": False, "int8": 0, "int16": 0, "uint16": 0, "int32": 0, "int64": 0,
    "float64": 0.0, "string": "", "bytes": b"", "records": None, "uuid": ZERO_UUID,
}


class Api:
    """One Kafka API: key, name, the version range this codec supports, and both schemas."""

    __slots__ = ("key", "name", "min_version", "max_version", "flexible", "request", "response")

    def __init__(self, key: int, name: str, min_version: int, max_version: int, *,
                 flexible: str, request: list[Field], response: list[Field]):
        self.key = key
        self.name = name
        self.min_version = min_version
        self.max_version = max_version
        self.flexible = parse_versions(flexible)
        self.request = request
        self.response = response

    def supports(self, version: int) -> bool:
        return self.min_version <= version <= self.max_version

    def is_flexible(self, version: int) -> bool:
        return _in(self.flexible, version)

    def __repr__(self) -> str:
        return f"Api({self.key}, {self.name!r}, v{self.min_version}-v{self.max_version})"
