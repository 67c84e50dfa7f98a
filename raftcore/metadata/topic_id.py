"""Topic ids: Kafka's ``Uuid``, 16 bytes, written in text as URL-safe base64 without padding
(22 characters), as ``partition.metadata`` files and Kafka's tools show them.

Two ids are reserved and never given to a topic: the zero id (no topic) and ``Uuid(0, 1)``,
the id of ``__cluster_metadata`` itself. Kafka also never hands out an id whose text starts
with ``-``, which a command line would take for an option; :meth:`TopicId.random` keeps both
rules. The random generator is the caller's (the controller's), so ids are reproducible in
tests.
"""

from __future__ import annotations

import base64
import binascii
import random
from dataclasses import dataclass

__all__ = ["TopicId"]


@dataclass(frozen=True, slots=True, order=True)
class TopicId:
    """A topic's 16-byte id."""

    raw: bytes

    def __post_init__(self) -> None:
        if len(self.raw) != 16:
            raise ValueError(f"a topic id is 16 bytes, not {len(self.raw)}")

    def __str__(self) -> str:
        return base64.urlsafe_b64encode(self.raw).rstrip(b"=").decode("ascii")

    def __repr__(self) -> str:
        return f"TopicId({self})"

    @property
    def reserved(self) -> bool:
        return self in (ZERO_TOPIC_ID, METADATA_TOPIC_ID)

    @classmethod
    def parse(cls, text: str) -> TopicId:
        """The id written as ``text`` (22 characters of URL-safe base64); ValueError naming the
        text otherwise."""
        if len(text) != 22:
            raise ValueError(f"topic id {text!r} is not 22 characters of URL-safe base64")
        try:
            raw = base64.urlsafe_b64decode(text + "==")
        except (binascii.Error, ValueError):
            raise ValueError(f"topic id {text!r} is not URL-safe base64") from None
        if str(cls(raw)) != text:  # the last character carries 2 bits only: one spelling each
            raise ValueError(f"topic id {text!r} is not URL-safe base64 of 16 bytes")
        return cls(raw)

    @classmethod
    def random(cls, rng: random.Random) -> TopicId:
        """A version-4 id from ``rng``, neither reserved nor starting with ``-`` (Kafka's
        ``Uuid.randomUuid``)."""
        while True:
            bits = rng.getrandbits(128)
            bits = (bits & ~(0xF << 76)) | (0x4 << 76)  # version 4
            bits = (bits & ~(0x3 << 62)) | (0x2 << 62)  # the IETF variant
            found = cls(bits.to_bytes(16, "big"))
            if not found.reserved and not str(found).startswith("-"):
                return found


ZERO_TOPIC_ID = TopicId(bytes(16))
METADATA_TOPIC_ID = TopicId((1).to_bytes(16, "big"))
