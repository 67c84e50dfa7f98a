"""raftcore.client.resumable: a writer whose identity survives it. Every attempt at the same
rows under the same name leaves each row in the log once: attempts that stopped part-way, that
were killed with batches in flight, or that run at the same time. Against a three-node cluster
of node processes on loopback."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from cluster_helpers import FAST, quorum, run

import raftcore
from raftcore.client.resumable import ExactlyOnceError, last_sequence, write_exactly_once
from raftcore.kafka.producer_ids import DERIVED_ID_BIT, derived_producer_id
from raftcore.node.local_cluster import LocalCluster
from raftcore.records import iter_batches
from raftcore.spark.options import ReadOptions
from raftcore.spark.remote import fetch_range

pytestmark = [pytest.mark.slow, pytest.mark.cluster(3, node_args=FAST, shared=True)]

BATCH = 50


def rows(tag: str, count: int) -> list[tuple[bytes, bytes]]:
    return [(f"{tag}-{n:06d}".encode(), b"v" * 30) for n in range(count)]


def batches(tag: str, count: int, size: int = BATCH) -> list[list[tuple[bytes, bytes]]]:
    all_rows = rows(tag, count)
    return [all_rows[i : i + size] for i in range(0, count, size)]


def committed_keys(c: LocalCluster, prefix: bytes) -> list[bytes]:
    """Keys starting with ``prefix`` of every committed record, in offset order."""
    hw = run(quorum(c)).high_watermark
    keys = []
    opts = ReadOptions.parse({"bootstrap": ",".join(c.bootstrap)})
    for data in fetch_range(opts, 0, hw):
        for batch in iter_batches(data):
            if not batch.is_control:
                keys.extend(r.key for r in batch.records() if r.key.startswith(prefix))
    return keys


def assert_once(c: LocalCluster, tag: str, count: int) -> None:
    keys = committed_keys(c, tag.encode() + b"-")
    assert len(keys) == len(set(keys)), f"{len(keys) - len(set(keys))} rows written twice"
    assert keys == [r[0] for r in rows(tag, count)]


def test_derived_producer_ids_are_stable_and_never_ones_a_node_hands_out() -> None:
    a = derived_producer_id("job-1/part-0")
    assert a == derived_producer_id("job-1/part-0") != derived_producer_id("job-1/part-1")
    assert a & DERIVED_ID_BIT and 0 < a < 1 << 63
    node_max = ((1 << 14) - 1) << 48 | ((1 << 48) - 1)  # node id, milliseconds and counter
    assert node_max < DERIVED_ID_BIT


def test_a_second_attempt_after_a_complete_one_writes_nothing_again(cluster) -> None:  # type: ignore[no-untyped-def]
    data = batches("full", 1000)
    first = run(write_exactly_once(cluster.bootstrap, "t/full", data))
    assert (first.rows, first.rows_sent, first.rows_found) == (1000, 1000, 0)
    again = run(write_exactly_once(cluster.bootstrap, "t/full", data))
    # Only the last batch is sent again, to learn that it is committed; the leader knows it.
    assert (again.rows_sent, again.rows_found) == (BATCH, 1000 - BATCH)
    assert again.last_offset == first.last_offset
    assert_once(cluster, "full", 1000)


def test_an_attempt_resumes_where_an_earlier_one_stopped(cluster) -> None:  # type: ignore[no-untyped-def]
    data = batches("part", 1000)
    run(write_exactly_once(cluster.bootstrap, "t/part", data[:7]))
    second = run(write_exactly_once(cluster.bootstrap, "t/part", data))
    assert second.rows_found == 6 * BATCH and second.rows_sent == 1000 - 6 * BATCH
    assert_once(cluster, "part", 1000)


def test_an_attempt_killed_with_batches_in_flight_is_completed_once(cluster, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A real process writes, and is SIGKILLed once some batches were acknowledged and more
    are in flight; the next attempt finishes the job."""
    script = tmp_path / "writer.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import asyncio, os, signal, sys
            from raftcore.client import resumable
            data = [[(f"kill-{{n:06d}}".encode(), b"v" * 30) for n in range(i, i + {BATCH})]
                    for i in range(0, 20000, {BATCH})]
            original = resumable._Writer._acknowledge
            def acknowledge(self, batch, offsets):
                original(self, batch, offsets)
                if batch.last >= 3000:  # several batches are in flight now
                    print("acked", batch.last, flush=True)
                    os.kill(os.getpid(), signal.SIGKILL)
            resumable._Writer._acknowledge = acknowledge
            asyncio.run(resumable.write_exactly_once({cluster.bootstrap!r}, "t/kill", data))
            """
        )
    )
    env = dict(os.environ, PYTHONPATH=str(Path(raftcore.__file__).resolve().parent.parent))
    proc = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    pid = derived_producer_id("t/kill")

    async def leader_has() -> int:
        from raftcore.client.cluster import ClusterClient

        client = ClusterClient(cluster.bootstrap)
        await client.start()
        try:
            return await last_sequence(client, "raftcore", pid, 10)
        finally:
            await client.close()

    assert run(leader_has()) >= 3049  # the killed attempt got that far
    data = batches("kill", 20000)
    second = run(write_exactly_once(cluster.bootstrap, "t/kill", data))
    assert second.rows_found >= 3000
    assert_once(cluster, "kill", 20000)


def test_two_attempts_at_once_write_every_row_once(cluster) -> None:  # type: ignore[no-untyped-def]
    data = batches("spec", 5000)

    async def both() -> list:
        return await asyncio.gather(
            write_exactly_once(cluster.bootstrap, "t/spec", data, window=3),
            write_exactly_once(cluster.bootstrap, "t/spec", data, window=7),
        )

    results = run(both())
    assert all(r.rows == 5000 for r in results)
    assert_once(cluster, "spec", 5000)


def test_rows_batched_differently_from_an_earlier_attempt_are_refused(cluster) -> None:  # type: ignore[no-untyped-def]
    run(write_exactly_once(cluster.bootstrap, "t/diff", batches("diff", 120, size=40)))
    with pytest.raises(ExactlyOnceError, match="falls inside the batch"):
        run(write_exactly_once(cluster.bootstrap, "t/diff", batches("diff", 200, size=50)))
    with pytest.raises(ExactlyOnceError, match="holds 120 rows"):
        run(write_exactly_once(cluster.bootstrap, "t/diff", batches("diff", 80, size=40)))
    assert_once(cluster, "diff", 120)
