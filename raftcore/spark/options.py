"""The options of ``spark.read.format("raftcore")`` and ``spark.readStream.format("raftcore")``,
parsed and checked once, on the driver, into one picklable value that travels to the executors
with each reader."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from raftcore.endpoints import Endpoint, parse_endpoint
from raftcore.security.client_config import CLIENT_PROPERTIES, client_security
from raftcore.security.config import ClientSecurity

__all__ = [
    "DEFAULT_PARTITION_RECORDS",
    "OPTIONS",
    "WRITE_OPTIONS",
    "ReadOptions",
    "SparkSourceError",
    "WriteOptions",
]

DEFAULT_PARTITION_RECORDS = 1_000_000

# Spark hands options over lower-cased (a case-insensitive dict); the documented spelling.
OPTIONS = {
    "bootstrap": "host:port[,host:port...] of a running cluster (or a path: .load(DIR))",
    "path": "a node's data directory (or its log/ directory), read from its files",
    "topic": "the cluster's topic (default 'raftcore')",
    "partitionRecords": "offsets per Spark partition (default 1,000,000)",
    "includeControl": "'true' to keep control records (LeaderChange...), default 'false'",
    "startOffset": "first offset to read (default: the log start)",
    "endOffset": "read below this offset; with a data directory: the committed offset",
    "fetchMaxBytes": "bytes per fetch from the cluster (default 8 MiB)",
    "requestTimeoutMs": "per request, and how long read() waits without progress (30000)",
    "maxRecordsPerBatch": "rows per Arrow batch yielded to Spark (default 65536)",
    # readStream only:
    "startingOffset": "where a new streaming query starts: earliest (default), latest, or N",
    "maxRecordsPerTrigger": "offsets per micro-batch at most (default: all committed)",
    "failOnDataLoss": "'false' to skip to the log start when a restart finds it moved past",
    **{key: "client security, librdkafka's name (docs/security.md)" for key in CLIENT_PROPERTIES},
}
_KNOWN = {name.lower(): name for name in OPTIONS}
_BATCH_ONLY = ("startoffset", "endoffset", "path")
_STREAM_ONLY = ("startingoffset", "maxrecordspertrigger", "failondataloss")


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
    topic: str = "raftcore"
    partition_records: int = DEFAULT_PARTITION_RECORDS
    include_control: bool = False
    start_offset: int | None = None
    end_offset: int | None = None
    fetch_max_bytes: int = 8 << 20
    request_timeout_ms: int = 30_000
    max_records_per_batch: int = 65536
    starting_offset: int | str = "earliest"  # or "latest", or an offset
    max_records_per_trigger: int | None = None
    fail_on_data_loss: bool = True
    security: ClientSecurity = field(default_factory=ClientSecurity)  # TLS (SASL) to the cluster

    @property
    def bootstrap_strings(self) -> list[str]:
        return _endpoint_strings(self.bootstrap)

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
                + (" (a stream starts at startingOffset and has no end)" if streaming else "")
            )
        bootstrap = tuple(_endpoints(given["bootstrap"])) if "bootstrap" in given else ()
        path = given.get("path") or None
        if bool(bootstrap) == bool(path):
            raise SparkSourceError(
                "give either .option('bootstrap', 'host:port,...') for a running cluster or "
                ".load(DIR) for a node's data directory"
                + (" -- not both" if bootstrap and path else "")
            )
        start = _opt_int(given, "startoffset", minimum=0)
        end = _opt_int(given, "endoffset", minimum=0)
        if start is not None and end is not None and end < start:
            raise SparkSourceError(f"endOffset {end} is below startOffset {start}")
        return cls(
            bootstrap=bootstrap,
            path=path,
            topic=given.get("topic", "raftcore"),
            partition_records=_int(given, "partitionrecords", DEFAULT_PARTITION_RECORDS, 1),
            include_control=_bool(given, "includecontrol"),
            start_offset=start,
            end_offset=end,
            fetch_max_bytes=_int(given, "fetchmaxbytes", 8 << 20, minimum=1024),
            request_timeout_ms=_int(given, "requesttimeoutms", 30_000, minimum=1),
            max_records_per_batch=_int(given, "maxrecordsperbatch", 65536, minimum=1),
            starting_offset=_starting(given),
            max_records_per_trigger=_opt_int(given, "maxrecordspertrigger", minimum=1),
            fail_on_data_loss=_bool(given, "failondataloss", "true"),
            security=_security(given),
        )


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


def _starting(given: dict[str, str]) -> int | str:
    text = given.get("startingoffset", "earliest").strip().lower()
    if text in ("earliest", "latest"):
        return text
    try:
        value = int(text.replace("_", "").replace(",", ""))
    except ValueError:
        value = -1
    if value < 0:
        raise SparkSourceError(
            f"option startingOffset={given['startingoffset']!r} must be earliest, latest or an "
            "offset (an integer >= 0)"
        )
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
