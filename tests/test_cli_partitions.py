"""``raftcore produce|consume|describe-quorum --partition P``: the command line speaks to one
partition of the topic, as Kafka's console tools do (``--topic`` and ``--partition``), default 0.
Three node processes serving a topic of three partitions (each its own Raft group, leaders
spread over the nodes); the commands run in-process through :func:`raftcore.cli.main`, which
returns the exit status the process would have."""

from __future__ import annotations

import re

import pytest

from raftcore.cli import build_parser, main
from raftcore.node.local_cluster import LocalCluster

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

PARTITIONS = 3


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def _consume(capsys, boot: str, partition: int) -> tuple[list[str], int]:
    """The values of ``partition`` and the high watermark ``consume`` stopped at."""
    argv = ["--bootstrap", boot, "--partition", str(partition), "--timeout-ms", "20000"]
    status, out, err = _run(capsys, "consume", *argv)
    assert status == 0, err
    found = re.search(r"up to the high watermark \(offset (\d+)\)", err)
    assert found, err
    return out.splitlines(), int(found.group(1))


def _high_watermark(capsys, boot: str, partition: int) -> int:
    status, out, err = _run(
        capsys,
        "describe-quorum",
        "--bootstrap",
        boot,
        "--partition",
        str(partition),
        "--timeout-ms",
        "20000",
    )
    assert status == 0, err
    found = re.search(r"^HighWatermark:\s+(\d+)$", out, re.MULTILINE)
    assert found, out
    return int(found.group(1))


def test_produce_and_consume_with_partition_write_and_read_that_partition_only(tmp_path, capsys):
    with LocalCluster(tmp_path / "cluster", 3, partitions=PARTITIONS) as cluster:
        cluster.start()
        boot = ",".join(cluster.bootstrap)
        status, _, err = _run(
            capsys, "produce", "--bootstrap", boot, "--partition", "2", "x", "y", "z",
            "--timeout-ms", "20000",
        )  # fmt: skip
        assert status == 0, err
        assert err.startswith("produced 3 records at offsets "), err

        assert _consume(capsys, boot, 2)[0] == ["x", "y", "z"]
        assert _consume(capsys, boot, 0)[0] == []  # partition 0 is not written to
        assert _consume(capsys, boot, 1)[0] == []

        # without --partition: partition 0, as before
        status, _, err = _run(capsys, "produce", "--bootstrap", boot, "a", "--timeout-ms", "20000")
        assert status == 0, err
        assert _consume(capsys, boot, 0)[0] == ["a"]
        values, end = _consume(capsys, boot, 2)
        assert values == ["x", "y", "z"]

        # describe-quorum --partition describes that partition's group: its high watermark is
        # where consume of that partition stopped (partition 1 holds no record of ours)
        assert _high_watermark(capsys, boot, 2) == end
        assert _high_watermark(capsys, boot, 1) == _consume(capsys, boot, 1)[1] < end


def test_a_partition_the_topic_does_not_have_is_one_line_naming_how_many_it_has(tmp_path, capsys):
    """Not retried until the timeout: Metadata lists the topic's partitions, and the command
    fails at once, exit 1, with one line saying how many there are."""
    with LocalCluster(tmp_path / "cluster", 1, partitions=PARTITIONS) as cluster:
        cluster.start()
        for command in (["produce", "v"], ["consume"], ["describe-quorum"]):
            argv = [*command, "--bootstrap", cluster.endpoint(1), "--partition", "5"]
            status, out, err = _run(capsys, *argv, "--timeout-ms", "20000")
            assert status == 1 and out == "", (command, out, err)
            assert err.splitlines() == [
                f"raftcore {command[0]}: topic raftcore has 3 partitions (0..2); no partition 5"
            ], err


def test_the_help_of_produce_consume_and_describe_quorum_names_partition():
    import argparse

    (sub,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    for command in ("produce", "consume", "describe-quorum"):
        text = sub.choices[command].format_help()
        assert "--partition P" in text and "(default: 0)" in text, text
    produce = " ".join(sub.choices["produce"].format_help().split())
    assert "does not spread keyed records over the partitions" in produce
    assert "partitioners" in produce


def test_a_negative_partition_is_refused_before_any_connection(capsys):
    with pytest.raises(SystemExit) as exit:
        main(["consume", "--bootstrap", "127.0.0.1:1", "--partition", "-1"])
    assert exit.value.code == 2
    assert "--partition" in capsys.readouterr().err
