"""spark.read.format("raftcore"): the batch source against a three-node cluster on loopback (node
processes, reachable from Spark's Python workers over TCP) and against a stopped node's files.

One Spark session (local[2], UI off) serves the module; skipped when pyspark or Java is missing."""

from __future__ import annotations

import shutil

import pytest
from spark_helpers import java_problem, spark_session

pytest.importorskip("pyarrow", reason="the Spark source yields Arrow batches: pip install pyarrow")
datasource = pytest.importorskip(
    "pyspark.sql.datasource", reason="needs pyspark>=4.1: pip install 'raftcore[spark]'"
)


if (_problem := java_problem()) is not None:
    pytest.skip(_problem, allow_module_level=True)
if not hasattr(datasource.DataSourceReader, "pushFilters"):
    pytest.skip("needs pyspark>=4.1 (filter pushdown)", allow_module_level=True)

from cluster_helpers import (  # noqa: E402
    FAST,
    key,
    produce,
    quorum,
    run,
    wait_caught_up,
    wait_dynamic,
)
from pyspark.sql.datasource import (  # noqa: E402
    EqualTo,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    LessThan,
    StringStartsWith,
)

from raftcore.node.local_cluster import LocalCluster  # noqa: E402
from raftcore.spark import ReadOptions, SparkSourceError  # noqa: E402
from raftcore.spark.planning import NO_BOUNDS, plan_ranges, push_filters  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.spark, pytest.mark.cluster(3, node_args=FAST)]

RECORDS = 1000
PART = 150  # offsets per Spark partition: several partitions
PUSHDOWN = "spark.sql.python.filterPushdown.enabled"


# ---- planning and options, no Spark session ----------------------------------------------------


def test_ranges_cover_the_committed_range_in_pieces_of_the_partition_size() -> None:
    ranges = plan_ranges(10, 45, 10)
    assert [(r.start, r.end) for r in ranges] == [(10, 20), (20, 30), (30, 40), (40, 45)]
    assert [(r.start, r.end) for r in plan_ranges(7, 7, 10)] == [(7, 7)]


def test_offset_comparisons_narrow_the_plan_and_others_go_back_to_spark() -> None:
    gt, lt, other = (
        GreaterThan(("offset",), 24),
        LessThan(("offset",), 31),
        StringStartsWith(("key",), "a"),
    )
    inside = In(("offset",), (3, 40))
    bounds, rest = push_filters([gt, lt, other, inside], NO_BOUNDS)
    assert rest == [other, inside]  # IN narrows the range only: Spark still checks it
    assert [(r.start, r.end) for r in plan_ranges(0, 100, 5, bounds)] == [(25, 30), (30, 31)]
    bounds, rest = push_filters(
        [GreaterThanOrEqual(("timestamp",), 5), EqualTo(("offset",), 9)], NO_BOUNDS
    )
    assert rest == [] and (bounds.ts_lo, bounds.offset_lo, bounds.offset_hi) == (5, 9, 10)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"bootstrap": "nohost"}, "expected host:port"),
        ({"bootstrap": "h:1", "path": "/x"}, "not both"),
        ({}, "give either"),
        ({"bootstrap": "h:1", "partitionrecords": "0"}, "partitionRecords=0 must be at least 1"),
        ({"bootstrap": "h:1", "colour": "red"}, "unknown option(s) ['colour']"),
        ({"bootstrap": "h:1", "includecontrol": "yes"}, "must be true or false"),
        ({"bootstrap": "h:1", "subscribe": "a", "topic": "b"}, "give one of subscribe"),
        ({"bootstrap": "h:1", "assign": '{"t":[-1]}'}, "needs a list of partitions >= 0"),
        ({"bootstrap": "h:1", "assign": "[0]"}, '{"topic":[0,1],...}'),
        ({"bootstrap": "h:1", "startOffset": "3", "startingOffsets": "earliest"}, "one of them"),
        ({"bootstrap": "h:1", "startingOffsets": "latest"}, "for spark.readStream only"),
        ({"bootstrap": "h:1", "startingOffsets": '{"t":{"0":-1}}'}, "for spark.readStream only"),
        ({"bootstrap": "h:1", "endingOffsets": '{"t":{"0":-2}}'}, "would read nothing"),
        ({"bootstrap": "h:1", "endingOffsets": '{"t":{"0":-3}}'}, "-2: earliest, -1: latest"),
        ({"bootstrap": "h:1", "subscribePattern": "("}, "subscribePattern='('"),
        ({"path": "/x", "assign": '{"t":[1]}'}, "read as one partition"),
    ],
)
def test_bad_options_are_refused_with_the_option_named(options: dict, message: str) -> None:
    with pytest.raises(SparkSourceError) as info:
        ReadOptions.parse(options)
    assert message in str(info.value)


def test_spark_kafka_names_and_raftcores_earlier_ones_plan_the_same_reads() -> None:
    """startOffset/endOffset are one offset for every partition; startingOffsets and
    endingOffsets JSON name partitions (-2 earliest, -1 latest), the others take the
    default; every span stays within the committed range."""
    from raftcore.client.offsets import CommittedRange
    from raftcore.spark.source import read_span

    committed = CommittedRange(10, 100)
    earlier = ReadOptions.parse({"bootstrap": "h:1", "startOffset": "20", "endOffset": "50"})
    assert read_span(earlier, "raftcore", 3, committed) == (20, 50)
    kafka = ReadOptions.parse(
        {
            "bootstrap": "h:1",
            "subscribe": "t",
            "startingOffsets": '{"t":{"0":20,"1":-2}}',
            "endingOffsets": '{"t":{"0":50,"1":-1}}',
        }
    )
    assert kafka.wanted() == {"t": None}
    assert read_span(kafka, "t", 0, committed) == (20, 50)
    assert read_span(kafka, "t", 1, committed) == (10, 100)
    assert read_span(kafka, "t", 2, committed) == (10, 100)  # not named: earliest to latest
    assert read_span(earlier, "raftcore", 0, CommittedRange(60, 100)) == (60, 60)  # moved on
    assigned = ReadOptions.parse({"bootstrap": "h:1", "assign": '{"t":[2,0]}'})
    assert assigned.wanted() == {"t": (0, 2)} and assigned.topic == "t"


# ---- against a cluster ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def spark(tmp_path_factory):  # type: ignore[no-untyped-def]
    yield from spark_session(tmp_path_factory.mktemp("spark-jvm"))


@pytest.fixture(scope="module")
def written(shared_cluster: LocalCluster) -> tuple[LocalCluster, list[int], int]:
    """The module's three nodes holding RECORDS records: the cluster, their offsets and its
    high watermark once every node has them."""
    c = shared_cluster
    run(wait_dynamic(c))  # its two control records come first, not after the high watermark read
    offsets = run(produce(c.bootstrap, 0, RECORDS))
    hw = run(wait_caught_up(c, c.node_ids))
    return c, offsets, hw


def _read(spark, bootstrap: list[str], **options: object):  # type: ignore[no-untyped-def]
    reader = spark.read.format("raftcore").option("bootstrap", ",".join(bootstrap))
    for name, value in options.items():
        reader = reader.option(name, str(value))
    return reader.load()


def _rows(df) -> list[tuple]:  # type: ignore[no-untyped-def]
    return [tuple(r) for r in df.select("offset", "key", "value").orderBy("offset").collect()]


def test_a_cluster_reads_as_what_it_committed_in_several_partitions(spark, written) -> None:  # type: ignore[no-untyped-def]
    c, offsets, hw = written
    df = _read(spark, c.bootstrap, partitionRecords=PART)
    assert df.schema.fieldNames() == [
        "offset",
        "leader_epoch",
        "timestamp",
        "key",
        "value",
        "headers",
        "batch_base_offset",
        "topic",
        "partition",
    ]
    assert df.rdd.getNumPartitions() == -(-hw // PART) > 1
    expected = [(o, key(n), b"v" * 20) for n, o in enumerate(offsets)]
    assert _rows(df) == expected  # the LeaderChange control records are left out


def test_control_records_are_there_when_asked(spark, written) -> None:  # type: ignore[no-untyped-def]
    c, offsets, hw = written
    rows = _rows(_read(spark, c.bootstrap, partitionRecords=PART, includeControl="true"))
    assert [r[0] for r in rows] == list(range(hw))  # every offset, control records included
    data = set(offsets)
    control = [r for r in rows if r[0] not in data]
    assert control and all(len(r[1]) == 4 for r in control)  # 4-byte control keys


def test_a_schema_naming_some_columns_reads_only_those(spark, written) -> None:  # type: ignore[no-untyped-def]
    c, offsets, _ = written
    reader = spark.read.format("raftcore").option("bootstrap", ",".join(c.bootstrap))
    df = reader.schema("value binary, offset long").option("partitionRecords", PART).load()
    assert df.schema.fieldNames() == ["value", "offset"]
    rows = [(r[1], bytes(r[0])) for r in df.orderBy("offset").collect()]
    assert rows == [(o, b"v" * 20) for o in offsets]
    with pytest.raises(Exception, match="got offset int"):
        reader.schema("offset int").load().collect()


@pytest.mark.parametrize("pushdown", ["true", "false"])
def test_offset_and_timestamp_filters(spark, written, pushdown: str) -> None:  # type: ignore[no-untyped-def]
    c, offsets, hw = written
    spark.conf.set(PUSHDOWN, pushdown)
    # A fresh DataFrame per query: with pushdown on, Spark 4.3 reuses the partitions planned
    # for a filtered query on the DataFrame it was derived from (docs/spark.md).
    try:
        x = offsets[700]
        df = _read(spark, c.bootstrap, partitionRecords=PART).where(f"offset >= {x}")
        planned = df.rdd.getNumPartitions()
        assert planned == (-(-(hw - x) // PART) if pushdown == "true" else -(-hw // PART))
        assert [r[0] for r in _rows(df)] == [o for o in offsets if o >= x]
        everything = (
            _read(spark, c.bootstrap, partitionRecords=PART)
            .select("offset", "timestamp")
            .orderBy("offset")
            .collect()
        )
        assert len(everything) == len(offsets)
        t = everything[len(everything) // 2][1]
        by_time = _read(spark, c.bootstrap, partitionRecords=PART).where(
            f"timestamp >= {t} AND offset < {offsets[-10]}"
        )
        assert [r[0] for r in _rows(by_time)] == [
            o for o, ts in everything if ts >= t and o < offsets[-10]
        ]
    finally:
        spark.conf.set(PUSHDOWN, "false")


def test_an_unreachable_cluster_fails_planning_with_its_address(spark) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(Exception, match=r"127\.0\.0\.1:9\b"):
        _read(spark, ["127.0.0.1:9"], requestTimeoutMs=500).count()


def test_a_stopped_nodes_files_read_as_the_cluster_did(spark, written, tmp_path) -> None:  # type: ignore[no-untyped-def]
    c, offsets, hw = written
    info = run(quorum(c))
    assert info.high_watermark == hw
    c.stop_all()
    directory = str(c.data_dir(2))
    df = (
        spark.read.format("raftcore")
        .option("endOffset", hw)
        .option("partitionRecords", PART)
        .load(directory)
    )
    assert df.rdd.getNumPartitions() > 1
    assert _rows(df) == [(o, key(n), b"v" * 20) for n, o in enumerate(offsets)]
    stamps = [tuple(r) for r in df.select("offset", "timestamp").orderBy("offset").collect()]
    t = stamps[len(stamps) * 3 // 4][1]
    spark.conf.set(PUSHDOWN, "true")
    try:  # a timestamp lower bound plans from the first batch that reaches it
        late = spark.read.format("raftcore").option("endOffset", hw).load(directory)
        assert [r[0] for r in _rows(late.where(f"timestamp >= {t}"))] == [
            o for o, ts in stamps if ts >= t
        ]
    finally:
        spark.conf.set(PUSHDOWN, "false")
    # Without endOffset only what the files prove committed is read: up to the newest
    # snapshot's end offset (an empty stand-in here; the source reads only its name).
    log_copy = tmp_path / "log"
    log_copy.mkdir()
    for segment in (c.data_dir(2) / "log").glob("*.log"):
        shutil.copy(segment, log_copy / segment.name)
    with pytest.raises(Exception, match="do not record a committed offset"):
        spark.read.format("raftcore").load(str(log_copy)).count()
    snapshot_end = offsets[499]
    (log_copy / f"{snapshot_end:020d}-{1:010d}.checkpoint").touch()
    prefix = _rows(spark.read.format("raftcore").load(str(log_copy)))
    assert prefix == [(o, key(n), b"v" * 20) for n, o in enumerate(offsets) if o < snapshot_end]
    with pytest.raises(Exception, match="not a raftcore data directory"):
        spark.read.format("raftcore").load(str(tmp_path)).count()


def test_a_directory_without_a_committed_offset_is_refused_with_its_message_not_raftcores_frames(
    tmp_path,
) -> None:
    """Spark prints the worker's traceback inside its error: the message once came under the
    frames of raftcore that found it (three of them, 30 lines in the user's terminal)."""
    import traceback

    from raftcore.log import SegmentedLog
    from raftcore.spark.source import SCHEMA, RaftcoreDataSource

    with SegmentedLog.open(tmp_path / "log") as log:
        log.append_as_leader([(b"k", b"v")] * 3, 1)
    reader = RaftcoreDataSource({"path": str(tmp_path / "log")}).reader(SCHEMA)
    with pytest.raises(SparkSourceError) as err:
        reader.partitions()  # type: ignore[attr-defined]
    frames = traceback.extract_tb(err.value.__traceback__)[1:]  # after this test's own
    assert [f.name for f in frames] == ["partitions"]
    assert err.value.__cause__ is None and err.value.__suppress_context__
    assert "do not record a committed offset" in str(err.value)
    assert "option('endOffset', N)" in str(err.value)
