"""The topic configs raftcore honours, with Kafka's names, types, defaults and bounds
(Kafka's ``LogConfig``), and their validation.

A config is stored as the text a client sent (ConfigRecord's value); :func:`check_config`
refuses an unknown name or a value that is not a number of the right type and bounds with
INVALID_CONFIG, naming the topic, the config and the value. ``cleanup.policy`` takes
``delete`` only: raftcore does not compact a log.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from raftcore.error_codes import Errors
from raftcore.metadata.errors import MetadataError

__all__ = [
    "TOPIC_CONFIGS",
    "TopicConfig",
    "check_config",
    "check_config_name",
    "effective_configs",
]

_INTEGER = re.compile(r"[+-]?[0-9]+")
_INT_MAX = (1 << 31) - 1
_LONG_MAX = (1 << 63) - 1


@dataclass(frozen=True, slots=True)
class TopicConfig:
    name: str
    default: str
    low: int | None  # None: a list of allowed words
    high: int
    allowed: tuple[str, ...] = ()


TOPIC_CONFIGS: dict[str, TopicConfig] = {
    c.name: c
    for c in (
        # retention.ms: -1 keeps records forever.
        TopicConfig("retention.ms", "604800000", -1, _LONG_MAX),
        # retention.bytes: any long; a negative value means no size limit.
        TopicConfig("retention.bytes", "-1", -_LONG_MAX - 1, _LONG_MAX),
        # segment.bytes: at least one legacy record's overhead (14 bytes), an int.
        TopicConfig("segment.bytes", "1073741824", 14, _INT_MAX),
        TopicConfig("segment.ms", "604800000", 1, _LONG_MAX),
        TopicConfig("max.message.bytes", "1048588", 0, _INT_MAX),
        TopicConfig("min.insync.replicas", "1", 1, _INT_MAX),
        TopicConfig("cleanup.policy", "delete", None, 0, allowed=("delete",)),
    )
}


def check_config_name(topic: str, name: str) -> TopicConfig:
    """The topic config called ``name``; INVALID_CONFIG if there is none."""
    config = TOPIC_CONFIGS.get(name)
    if config is None:
        raise MetadataError(
            Errors.INVALID_CONFIG,
            f"topic {topic}: unknown topic config {name!r} (known: {', '.join(TOPIC_CONFIGS)})",
        )
    return config


def check_config(topic: str, name: str, value: str) -> None:
    """Refuse ``name=value`` for ``topic`` with INVALID_CONFIG unless it is a known topic config
    with a value of its type within its bounds."""
    config = check_config_name(topic, name)
    if config.low is None:
        words = [w.strip() for w in value.split(",")]
        if not all(w in config.allowed for w in words):
            raise MetadataError(
                Errors.INVALID_CONFIG,
                f"topic {topic}: {name}={value!r} is not supported "
                f"(allowed: {', '.join(config.allowed)})",
            )
        return
    # Java's parseLong after ConfigDef's trim: ASCII digits with an optional sign (Python's
    # int() would also take '1_000' and other scripts' digits).
    if not _INTEGER.fullmatch(value.strip()):
        raise MetadataError(
            Errors.INVALID_CONFIG, f"topic {topic}: {name}={value!r} is not an integer"
        )
    number = int(value.strip())
    if not config.low <= number <= config.high:
        raise MetadataError(
            Errors.INVALID_CONFIG,
            f"topic {topic}: {name}={value!r} is outside [{config.low}, {config.high}]",
        )


def effective_configs(overrides: Mapping[str, str]) -> dict[str, str]:
    """Every topic config: the topic's own value where it has one, Kafka's default otherwise."""
    return {name: overrides.get(name, c.default) for name, c in TOPIC_CONFIGS.items()}
