"""The options of ``spark.read.format("raftcore")`` and ``spark.readStream.format("raftcore")``,
parsed and checked once, on the driver, into one picklable value that travels to the executors
with each reader."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from raftcore.endpoints import Endpoint, parse_endpoint
from raftcore.security.client_config import CLIENT_PROPERTIES, client_security
from raftcore.security.config import ClientSecurity

__all__ = [
    "DEFAULT_PARTITION_RECORDS",
    "EARLIEST",
    "LATEST",
    "OPTIONS",
    "WRITE_OPTIONS",
    "ReadOptions",
    "SparkSourceError",
    "OffsetSpec",
    "WriteOptions",
    "resolve_offset",
]

DEFAULT_PARTITION_RECORDS = 1_000_000

# Spark hands options over lower-cased (a case-insensitive dict); the documented spelling.
OPTIONS = {
    "bootstrap": "host:port[,host:port...] of a running cluster (or a path: .load(DIR))",
    "path": "a node's data directory (or its log/ directory), read from its files",
    "subscribe": "the topics to read, comma-separated: every partition of each",
    "subscribePattern": "a regular expression: every partition of every topic it matches",
    "assign": 'JSON {"topic":[0,1]}: these partitions only',
    "topic": "one topic, every partition (as subscribe; default 'raftcore')",
    "startingOffsets": 'earliest (default), latest, or JSON {"topic":{"0":23,"1":-2}}',
    "endingOffsets": 'spark.read: latest (default), or JSON {"topic":{"0":50,"1":-1}}',
    "partitionRecords": "offsets per Spark partition at most (default 1,000,000)",
    "includeControl": "'true' to keep control records (LeaderChange...), default 'false'",
    "startOffset": "first offset to read in every partition (default: the log start)",
    "endOffset": "read below this offset in every partition; with a data directory: the "
    "committed offset",
    "fetchMaxBytes": "bytes per fetch from the cluster (default 8 MiB)",
    "requestTimeoutMs": "per request, and how long read() waits without progress (30000)",
    "maxRecordsPerBatch": "rows per Arrow batch yielded to Spark (default 65536)",
    # readStream only:
    "startingOffset": "as startingOffsets, or N: offset N of every partition",
    "maxOffsetsPerTrigger": "offsets per micro-batch at most, over all partitions (default: all "
    "committed)",
    "maxRecordsPerTrigger": "as maxOffsetsPerTrigger",
    "failOnDataLoss": "'false' to skip to the log start when a restart finds it moved past",
    **{key: "client security, librdkafka's name (docs/security.md)" for key in CLIENT_PROPERTIES},
}
_KNOWN = {name.lower(): name for name in OPTIONS}
_BATCH_ONLY = ("startoffset", "endoffset", "endingoffsets", "path")
_STREAM_ONLY = ("startingoffset", "maxoffsetspertrigger", "maxrecordspertrigger", "failondataloss")
# The same setting under Spark's Kafka name and raftcore's earlier one: give one of them.
_ALIASES = (
    ("startingoffsets", "startoffset"),
    ("startingoffsets", "startingoffset"),
    ("endingoffsets", "endoffset"),
    ("maxoffsetspertrigger", "maxrecordspertrigger"),
)
_SUBSCRIPTIONS = ("subscribe", "subscribepattern", "assign", "topic")
EARLIEST = -2  # in JSON offsets, as Spark's Kafka source writes them
LATEST = -1

# Where reading starts or ends: "earliest", "latest", an offset of every partition, or
# per partition ({topic: {partition: offset}}, where -2 means earliest and -1 latest).
OffsetSpec = str | int | dict[str, dict[int, int]]


class SparkSourceError(ValueError):
    """A bad option, a directory that is not a raftcore data directory, or a range that can no
    longer be read; the message names the option, path or offsets."""


def plainly(exc: SparkSourceError) -> SparkSourceError:
    """``exc`` anew, to raise ``from None`` where Spark calls raftcore: Spark prints the Python
    worker's traceback inside its own error, and a user's mistake (a missing option, a wrong
    path) needs its message, not the frames of raftcore where it was found."""
    return SparkSourceError(str(exc))


@dataclass(frozen=True, slots=True)
class ReadOptions:
    bootstrap: tuple[Endpoint, ...] = ()
    path: str | None = None
    subscribe: tuple[str, ...] = ("raftcore",)  # topics, every partition of each
    subscribe_pattern: str | None = None  # instead: every topic the pattern matches
    assign: dict[str, tuple[int, ...]] | None = None  # instead: these partitions
    partition_records: int = DEFAULT_PARTITION_RECORDS
    include_control: bool = False
    starting_offsets: OffsetSpec = "earliest"
    ending_offsets: OffsetSpec = "latest"
    fetch_max_bytes: int = 8 << 20
    request_timeout_ms: int = 30_000
    max_records_per_batch: int = 65536
    max_offsets_per_trigger: int | None = None
    fail_on_data_loss: bool = True
    security: ClientSecurity = field(default_factory=ClientSecurity)  # TLS (SASL) to the cluster

    @property
    def bootstrap_strings(self) -> list[str]:
        return _endpoint_strings(self.bootstrap)

    @property
    def topic(self) -> str:
        """The first topic named: the one a data directory's log is read as."""
        return next(iter(self.assign)) if self.assign else self.subscribe[0]

    def wanted(self) -> dict[str, tuple[int, ...] | None]:
        """``{topic: partitions}`` to read (None: every partition of the topic); with
        subscribePattern, empty: the caller lists the topics."""
        if self.assign is not None:
            return dict(self.assign)
        if self.subscribe_pattern is not None:
            return {}
        return dict.fromkeys(self.subscribe)

    @classmethod
    def parse(cls, options: Mapping[str, str], streaming: bool = False) -> ReadOptions:
        given = {str(k).lower(): str(v) for k, v in options.items()}
        unknown = sorted(set(given) - set(_KNOWN))
        if unknown:
            known = ", ".join(OPTIONS)
            raise SparkSourceError(f"unknown option(s) {unknown} for raftcore; known: {known}")
        if streaming and "path" in given:
            raise SparkSourceError(
                "spark.readStream.format('raftcore') reads a running cluster: give "
                ".option('bootstrap', 'host:port,...'), not a path"
            )
        wrong = [_KNOWN[k] for k in (_BATCH_ONLY if streaming else _STREAM_ONLY) if k in given]
        if wrong:
            raise SparkSourceError(
                f"option(s) {wrong} are for spark.{'read' if streaming else 'readStream'} only"
                + (" (a stream starts at startingOffsets and has no end)" if streaming else "")
            )
        for a, b in _ALIASES:
            if a in given and b in given:
                raise SparkSourceError(
                    f"options {_KNOWN[a]} and {_KNOWN[b]} say the same: give one of them"
                )
        named = [_KNOWN[k] for k in _SUBSCRIPTIONS if k in given]
        if len(named) > 1:
            raise SparkSourceError(
                f"give one of subscribe, subscribePattern, assign, topic: {named}"
            )
        bootstrap = tuple(_endpoints(given["bootstrap"])) if "bootstrap" in given else ()
        path = given.get("path") or None
        if bool(bootstrap) == bool(path):
            raise SparkSourceError(
                "give either .option('bootstrap', 'host:port,...') for a running cluster or "
                ".load(DIR) for a node's data directory"
                + (" -- not both" if bootstrap and path else "")
            )
        if path and ("assign" in given or "subscribepattern" in given):
            raise SparkSourceError(
                "a data directory is read as one partition, its topic's partition 0: give "
                "topic (or subscribe) with .load(DIR), not assign or subscribePattern"
            )
        starting = _offset_spec(given, ("startingoffsets", "startoffset", "startingoffset"))
        ending = _offset_spec(given, ("endingoffsets", "endoffset"), default="latest")
        # as Spark's Kafka source: a batch read does not start at latest or end at earliest
        if not streaming and _names(starting, LATEST):
            raise SparkSourceError(
                "startingOffsets latest (-1) is for spark.readStream only: a batch read "
                "starting at the high watermark reads nothing"
            )
        if _names(ending, EARLIEST):
            raise SparkSourceError(
                "endingOffsets earliest (-2) would read nothing: use latest (-1) or an offset"
            )
        if isinstance(starting, int) and isinstance(ending, int) and ending < starting:
            raise SparkSourceError(f"endOffset {ending} is below startOffset {starting}")
        max_per_trigger = _opt_int(given, "maxoffsetspertrigger", minimum=1)
        if max_per_trigger is None:
            max_per_trigger = _opt_int(given, "maxrecordspertrigger", minimum=1)
        return cls(
            bootstrap=bootstrap,
            path=path,
            subscribe=_topics(given.get("subscribe") or given.get("topic") or "raftcore"),
            subscribe_pattern=_pattern(given),
            assign=_assign(given["assign"]) if "assign" in given else None,
            partition_records=_int(given, "partitionrecords", DEFAULT_PARTITION_RECORDS, 1),
            include_control=_bool(given, "includecontrol"),
            starting_offsets=starting,
            ending_offsets=ending,
            fetch_max_bytes=_int(given, "fetchmaxbytes", 8 << 20, minimum=1024),
            request_timeout_ms=_int(given, "requesttimeoutms", 30_000, minimum=1),
            max_records_per_batch=_int(given, "maxrecordsperbatch", 65536, minimum=1),
            max_offsets_per_trigger=max_per_trigger,
            fail_on_data_loss=_bool(given, "failondataloss", "true"),
            security=_security(given),
        )


def resolve_offset(spec: OffsetSpec, topic: str, partition: int, default: int) -> int:
    """The offset ``spec`` names for ``topic`` ``partition``: an offset, or EARLIEST / LATEST
    (-2 / -1); a partition that a JSON spec leaves out gets ``default``."""
    if spec == "earliest":
        return EARLIEST
    if spec == "latest":
        return LATEST
    if isinstance(spec, int):
        return spec
    assert isinstance(spec, dict)
    return spec.get(topic, {}).get(partition, default)


def _names(spec: OffsetSpec, offset: int) -> bool:
    """Does ``spec`` name EARLIEST or LATEST (``offset``) anywhere?"""
    if isinstance(spec, dict):
        return any(o == offset for parts in spec.values() for o in parts.values())
    return spec == {EARLIEST: "earliest", LATEST: "latest"}[offset]


def _topics(text: str) -> tuple[str, ...]:
    topics = tuple(dict.fromkeys(t.strip() for t in text.split(",") if t.strip()))
    if not topics:
        raise SparkSourceError(f"option subscribe={text!r} names no topic")
    return topics


def _pattern(given: dict[str, str]) -> str | None:
    if "subscribepattern" not in given:
        return None
    try:
        re.compile(given["subscribepattern"])
    except re.error as exc:
        raise SparkSourceError(
            f"option subscribePattern={given['subscribepattern']!r}: {exc}"
        ) from None
    return given["subscribepattern"]


def _json(text: str, option: str, shape: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise SparkSourceError(f"option {option}={text!r} is not JSON ({exc}); {shape}") from None


def _assign(text: str) -> dict[str, tuple[int, ...]]:
    shape = 'expected {"topic":[0,1],...}'
    value = _json(text, "assign", shape)
    if not isinstance(value, dict) or not value:
        raise SparkSourceError(f"option assign={text!r}: {shape}")
    assign: dict[str, tuple[int, ...]] = {}
    for topic, parts in value.items():
        if (
            not isinstance(parts, list)
            or not parts
            or any(isinstance(p, bool) or not isinstance(p, int) or p < 0 for p in parts)
        ):
            raise SparkSourceError(
                f"option assign={text!r}: topic {topic!r} needs a list of partitions >= 0; {shape}"
            )
        assign[topic] = tuple(sorted(set(parts)))
    return assign


def _offset_spec(
    given: dict[str, str], keys: tuple[str, ...], default: str = "earliest"
) -> OffsetSpec:
    """The first of ``keys`` given: earliest, latest, an offset (raftcore's earlier options)
    or Spark's JSON offsets per partition."""
    key = next((k for k in keys if k in given), None)
    if key is None:
        return default
    option, text = _KNOWN[key], given[key].strip()
    if text.lower() in ("earliest", "latest"):
        return text.lower()
    if not text.startswith("{"):
        try:
            value = int(text.replace("_", "").replace(",", ""))
        except ValueError:
            value = -1
        if value < 0:
            raise SparkSourceError(
                f"option {option}={given[key]!r} must be earliest, latest, an offset (an integer "
                '>= 0) or JSON {"topic":{"0":23}}'
            )
        return value
    shape = 'expected {"topic":{"0":23,"1":-2}} (-2: earliest, -1: latest)'
    value = _json(text, option, shape)
    spec: dict[str, dict[int, int]] = {}
    if not isinstance(value, dict):
        raise SparkSourceError(f"option {option}={text!r}: {shape}")
    for topic, parts in value.items():
        if not isinstance(parts, dict):
            raise SparkSourceError(f"option {option}={text!r}: {shape}")
        spec[topic] = {}
        for p, offset in parts.items():
            try:
                index = int(p)
            except ValueError:
                index = -1
            if index < 0 or isinstance(offset, bool) or not isinstance(offset, int) or offset < -2:
                raise SparkSourceError(
                    f"option {option}={text!r}: partition {p!r} offset {offset!r}; {shape}"
                )
            spec[topic][index] = offset
    return spec


def _endpoint_strings(endpoints: tuple[Endpoint, ...]) -> list[str]:
    """``host:port`` of each endpoint, as the clients take them (IPv6 hosts bracketed)."""
    return [f"[{e.host}]:{e.port}" if ":" in e.host else f"{e.host}:{e.port}" for e in endpoints]


def _endpoints(text: str) -> list[Endpoint]:
    items = [item.strip() for item in text.split(",") if item.strip()]
    if not items:
        raise SparkSourceError("option bootstrap is empty; expected host:port[,host:port...]")
    try:
        return [parse_endpoint(item) for item in items]
    except ValueError as exc:
        raise SparkSourceError(f"option bootstrap={text!r}: {exc}") from None


def _security(given: dict[str, str]) -> ClientSecurity:
    """The client security options (librdkafka's names: security.protocol, ssl.*, sasl.*)."""
    props = {key: given[key] for key in CLIENT_PROPERTIES if key in given}
    if not props:
        return ClientSecurity()
    try:
        return client_security(props, "the raftcore options")
    except ValueError as exc:
        raise SparkSourceError(str(exc)) from None


def _int(
    given: dict[str, str],
    key: str,
    default: int,
    minimum: int,
    known: Mapping[str, str] = _KNOWN,
) -> int:
    value = _opt_int(given, key, minimum, known)
    return default if value is None else value


def _opt_int(
    given: dict[str, str], key: str, minimum: int, known: Mapping[str, str] = _KNOWN
) -> int | None:
    if key not in given:
        return None
    text = given[key].replace("_", "").replace(",", "")
    try:
        value = int(text)
    except ValueError:
        raise SparkSourceError(f"option {known[key]}={given[key]!r} is not an integer") from None
    if value < minimum:
        raise SparkSourceError(f"option {known[key]}={value} must be at least {minimum}")
    return value


def _bool(given: dict[str, str], key: str, default: str = "false") -> bool:
    text = given.get(key, default).strip().lower()
    if text not in ("true", "false"):
        raise SparkSourceError(f"option {_KNOWN[key]}={given[key]!r} must be true or false")
    return text == "true"


# df.write / df.writeStream .format("raftcore"): the sink's options.
WRITE_OPTIONS = {
    "bootstrap": "host:port[,host:port...] of a running cluster (required)",
    "topic": "the cluster's topic (default 'raftcore')",
    "batchRecords": "rows per record batch at most (default 1000)",
    "batchBytes": "bytes per record batch, about, at most (default 1 MiB)",
    "compression": "none (default), gzip, snappy, lz4 or zstd",
    "inFlight": "record batches a task keeps unanswered (default 10)",
    "requestTimeoutMs": "per request (default 30000)",
    "deliveryTimeoutMs": "how long a batch may go unacknowledged before the task fails (120000)",
    "writeId": "names the write: run a failed job again with it to finish it exactly once",
    **{key: "client security, librdkafka's name (docs/security.md)" for key in CLIENT_PROPERTIES},
}
_WRITE_KNOWN = {name.lower(): name for name in WRITE_OPTIONS}
_SPARK_OWN = {"checkpointlocation"}  # writeStream's, handed to every sink


@dataclass(frozen=True, slots=True)
class WriteOptions:
    bootstrap: tuple[Endpoint, ...]
    topic: str = "raftcore"
    batch_records: int = 1000
    batch_bytes: int = 1 << 20
    compression: str = "none"
    in_flight: int = 10
    request_timeout_ms: int = 30_000
    delivery_timeout_ms: int = 120_000
    write_id: str | None = None
    security: ClientSecurity = field(default_factory=ClientSecurity)  # TLS (SASL) to the cluster

    @property
    def bootstrap_strings(self) -> list[str]:
        return _endpoint_strings(self.bootstrap)

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> WriteOptions:
        given = {str(k).lower(): str(v) for k, v in options.items()}
        if "path" in given:
            raise SparkSourceError(
                "the raftcore sink writes to a running cluster: give .option('bootstrap', "
                "'host:port,...') and call .save() without a path"
            )
        unknown = sorted(set(given) - set(_WRITE_KNOWN) - _SPARK_OWN)
        if unknown:
            known = ", ".join(WRITE_OPTIONS)
            raise SparkSourceError(f"unknown sink option(s) {unknown}; known: {known}")
        if "bootstrap" not in given:
            raise SparkSourceError("the raftcore sink needs .option('bootstrap', 'host:port,...')")
        compression = given.get("compression", "none").strip().lower()
        if compression not in ("none", "gzip", "snappy", "lz4", "zstd"):
            raise SparkSourceError(
                f"option compression={given['compression']!r} must be none, gzip, snappy, "
                "lz4 or zstd"
            )
        write_id = given.get("writeid", "").strip() or None
        return cls(
            bootstrap=tuple(_endpoints(given["bootstrap"])),
            topic=given.get("topic", "raftcore"),
            batch_records=_int(given, "batchrecords", 1000, minimum=1, known=_WRITE_KNOWN),
            batch_bytes=_int(given, "batchbytes", 1 << 20, minimum=1024, known=_WRITE_KNOWN),
            compression=compression,
            in_flight=_int(given, "inflight", 10, minimum=1, known=_WRITE_KNOWN),
            request_timeout_ms=_int(given, "requesttimeoutms", 30_000, 1, known=_WRITE_KNOWN),
            delivery_timeout_ms=_int(given, "deliverytimeoutms", 120_000, 1, known=_WRITE_KNOWN),
            write_id=write_id,
            security=_security(given),
        )
