"""Prometheus metrics (issue 12): every node serves its own, on an optional HTTP port; the
leader's view of the replicas, the hot-path counters and histograms, elections; the process
option ``--metrics-port``; docs/metrics.md lists exactly what a node exposes; and
``describe-quorum --watch`` prints a table per interval until Ctrl-C."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import prometheus_client
import pytest
from cluster_helpers import formatted
from node_helpers import FAST, cluster, leader_of
from prometheus_client.parser import text_string_to_metric_families
from waits import until as wait_until

import raftcore
from raftcore.client import Producer
from raftcore.endpoints import Endpoint
from raftcore.errors import RaftcoreError
from raftcore.node.config import NodeConfig
from raftcore.node.local_cluster import LocalCluster, free_ports
from raftcore.node.node import RaftNode
from raftcore.statemachine import DictStateMachine
from raftcore.topic_partition import TopicPartition

pytestmark = [pytest.mark.slow, pytest.mark.timeout(60)]

ROOT = Path(raftcore.__file__).parent.parent  # the raftcore under test (installed in CI)
DOC = Path(__file__).resolve().parent.parent / "docs" / "metrics.md"  # the checkout's docs
CLUSTER_ID = "metrics-tests"
P0 = {"topic": "raftcore", "partition": "0"}  # the labels of partition 0's series


def metric_samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """{(sample name, sorted labels): value} of an exposition text."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: dict, name: str, **labels: str) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


def scrape(node: RaftNode) -> dict:
    return metric_samples(node.metrics_text().decode())


async def http_get(url: str, data: bytes | None = None) -> tuple[int, str]:
    """GET ``url`` (POST with ``data``): the status and the body."""

    def get() -> tuple[int, str]:
        try:
            with urllib.request.urlopen(url, data=data, timeout=5) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    return await asyncio.get_running_loop().run_in_executor(None, get)


def url_of(node: RaftNode) -> str:
    assert node.metrics_address is not None
    host, port = node.metrics_address
    return f"http://{host}:{port}/metrics"


# The shared cluster's arguments for this module's nodes: each serves metrics on a free port.
METRICS = {"cluster_id": CLUSTER_ID, "metrics_port": 0}


def run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(asyncio.wait_for(coro, 45))


# ---- an in-process cluster ------------------------------------------------------------------

REQUESTS = 20
PER_REQUEST = 10


def test_leader_metrics_show_role_offsets_requests_bytes_fsyncs_connections_and_replica_lag(
    tmp_path,
):
    async def main():
        async with cluster(tmp_path, **METRICS) as nodes:
            leader = await leader_of(nodes)
            async with Producer([str(leader.config.listen)]) as producer:
                for n in range(REQUESTS):
                    last = (await producer.send([(b"k", b"v%d" % n)] * PER_REQUEST))[1]
                status, text = await http_get(url_of(leader))  # the producer still connected
            assert status == 200
            m = metric_samples(text)
            assert value(m, "raftcore_raft_role", **P0, role="leader") == 1
            assert value(m, "raftcore_raft_role", **P0, role="follower") == 0
            assert value(m, "raftcore_raft_leader_id", **P0) == leader.node_id
            assert value(m, "raftcore_raft_high_watermark", **P0) == last + 1
            assert value(m, "raftcore_log_end_offset", **P0) == last + 1
            assert value(m, "raftcore_log_start_offset", **P0) == 0
            produced = value(m, "raftcore_kafka_request_duration_seconds_count", request="Produce")
            assert produced is not None and produced >= REQUESTS
            in_buckets = value(
                m, "raftcore_kafka_request_duration_seconds_bucket", request="Produce", le="+Inf"
            )
            assert in_buckets == produced
            assert value(m, "raftcore_produce_records_total") == REQUESTS * PER_REQUEST
            assert value(m, "raftcore_network_received_bytes_total", connection="inbound") > 0
            assert value(m, "raftcore_network_sent_bytes_total", connection="inbound") > 0
            assert value(m, "raftcore_log_fsync_duration_seconds_count") > 0
            assert value(m, "raftcore_connections", connection="inbound") > 0
            await wait_until(  # its connections to both other voters (they reconnect)
                lambda: value(scrape(leader), "raftcore_connections", connection="peer") == 2,
                what="two peer connections",
            )
            followers = sorted(n.node_id for n in nodes if n is not leader)
            for f in followers:  # present for both, as the leader sees them
                key = {"replica": str(f), "voter": "true"}
                assert value(m, "raftcore_replica_lag_records", **P0, **key) is not None
                assert (
                    value(m, "raftcore_replica_last_caught_up_timestamp_seconds", **P0, **key) > 0
                )

            def caught_up():  # type: ignore[no-untyped-def]
                s = scrape(leader)
                return (
                    all(
                        value(s, "raftcore_replica_lag_records", **P0, replica=str(f), voter="true")
                        == 0
                        and value(
                            s, "raftcore_replica_log_end_offset", **P0, replica=str(f), voter="true"
                        )
                        == last + 1
                        for f in followers
                    )
                    and s
                )

            s = await wait_until(caught_up, what="both followers at lag 0")
            for f in followers:  # caught up within the last few seconds, by the wall clock
                ts = value(
                    s,
                    "raftcore_replica_last_caught_up_timestamp_seconds",
                    **P0,
                    replica=str(f),
                    voter="true",
                )
                assert abs(time.time() - ts) < 5

    run(main())


def test_a_follower_shows_its_role_and_the_leader_and_no_replica_view(tmp_path):
    async def main():
        async with cluster(tmp_path, **METRICS) as nodes:
            leader = await leader_of(nodes)
            follower = next(n for n in nodes if n is not leader)
            status, text = await http_get(url_of(follower))
            assert status == 200
            m = metric_samples(text)
            assert value(m, "raftcore_raft_role", **P0, role="follower") == 1
            assert value(m, "raftcore_raft_role", **P0, role="leader") == 0
            assert value(m, "raftcore_raft_leader_id", **P0) == leader.node_id
            assert value(m, "raftcore_raft_epoch", **P0) == leader.leader_and_epoch.epoch
            assert value(m, "raftcore_node_info", node_id=str(follower.node_id),
                         cluster_id=CLUSTER_ID, topic="raftcore") == 1  # fmt: skip
            assert not any(name.startswith("raftcore_replica_") for name, _ in m)
            # each node has its own registry: nothing went to the process-wide default one
            default = prometheus_client.generate_latest(prometheus_client.REGISTRY).decode()
            assert "raftcore_" not in default

    run(main())


def test_a_stopped_replicas_last_fetch_time_is_the_same_at_every_scrape(tmp_path):
    """The leader keeps monotonic times; the metric is wall-clock. The conversion must not
    move a fixed moment from scrape to scrape (it moved by up to a millisecond, as a graph
    of "seconds since the last fetch" would show as noise)."""

    async def main():
        async with cluster(tmp_path, **METRICS) as nodes:
            leader = await leader_of(nodes)
            follower = next(n for n in nodes if n is not leader)
            # its first request to a new leader may be an UpdateRaftVoter (KIP-853): wait for
            # a fetch, the moment the metric is about
            seen = leader.core.state.voter_states[follower.node_id]
            for _ in range(250):
                if seen.last_fetch_ms >= 0:
                    break
                await asyncio.sleep(0.02)
            await follower.stop(timeout_s=0.5)  # fetches no more
            key = {"replica": str(follower.node_id), "voter": "true"}
            # A fetch it sent before it stopped may still be handled (a long poll, on a slow
            # machine): wait until the moment holds still for a second.
            last = value(
                scrape(leader), "raftcore_replica_last_fetch_timestamp_seconds", **P0, **key
            )
            for _ in range(10):
                await asyncio.sleep(1.0)
                now = value(
                    scrape(leader), "raftcore_replica_last_fetch_timestamp_seconds", **P0, **key
                )
                if now == last:
                    break
                last = now
            seen = set()
            for _ in range(10):
                seen.add(
                    value(
                        scrape(leader), "raftcore_replica_last_fetch_timestamp_seconds", **P0, **key
                    )
                )
                await asyncio.sleep(0.013)
            assert len(seen) == 1, seen
            assert abs(time.time() - seen.pop()) < 10

    run(main())


def test_a_survivor_counts_the_election_it_started_after_the_leader_stopped(tmp_path):
    async def main():
        async with cluster(tmp_path, **METRICS) as nodes:
            leader = await leader_of(nodes)
            survivors = [n for n in nodes if n is not leader]
            before = {
                n.node_id: value(scrape(n), "raftcore_raft_elections_started_total", **P0)
                for n in survivors
            }
            await leader.stop(timeout_s=0.5)
            new = await leader_of(survivors)
            after = scrape(new)
            assert value(after, "raftcore_raft_elections_started_total", **P0) > before[new.node_id]
            assert value(after, "raftcore_raft_elections_won_total", **P0) >= 1
            assert value(after, "raftcore_raft_role", **P0, role="leader") == 1

    run(main())


def test_a_single_voter_counts_the_election_it_wins_in_one_step(tmp_path):
    """A lone voter goes to candidate and leader within one step of the core: the node never
    sees it as a candidate, and still counts one election started and one won."""

    async def main():
        async with cluster(tmp_path, **METRICS, size=1) as (node,):
            await leader_of([node])
            m = scrape(node)
            assert value(m, "raftcore_raft_elections_started_total", **P0) == 1
            assert value(m, "raftcore_raft_elections_won_total", **P0) == 1

    run(main())


# ---- per-partition series ---------------------------------------------------------------------


def partitions_labelled(samples: dict) -> set[str]:
    """The ``partition`` labels of a scrape's samples."""
    return {v for _, labels in samples for k, v in labels if k == "partition"}


def test_each_partitions_series_carry_its_topic_and_partition_and_a_write_moves_only_its_own(
    tmp_path,
):
    """Kafka's per-partition metrics (kafka.log:type=Log,name=LogEndOffset,topic=,partition=):
    a node hosting three partitions shows each one's high watermark and log end offset under
    its own labels, read from that partition's group."""
    from test_partitions import leaders

    async def main():
        async with cluster(tmp_path, **METRICS, partitions=3) as nodes:
            led = await leaders(nodes)
            one = TopicPartition("raftcore", 1)
            appended = await led[1].groups[one].appends().append([(b"k", b"v")] * 50, True)
            for node in nodes:
                m = scrape(node)  # on the loop: the same moment as the groups read below
                assert partitions_labelled(m) == {"0", "1", "2"}
                for name, group in node.groups.items():
                    if name.topic != "raftcore":
                        continue  # __consumer_offsets' partitions have no series yet
                    labels = {"topic": "raftcore", "partition": str(name.partition)}
                    assert group.core is not None and group.log is not None
                    hw = value(m, "raftcore_raft_high_watermark", **labels)
                    assert hw == group.core.high_watermark, (node.node_id, name)
                    assert value(m, "raftcore_log_end_offset", **labels) == group.log.end_offset
                    leads = 1 if group.is_leader() else 0
                    assert value(m, "raftcore_raft_role", **labels, role="leader") == leads
                assert value(m, "raftcore_metrics_partitions_omitted") == 0
            m = scrape(led[1])
            hws = {
                p: value(m, "raftcore_raft_high_watermark", topic="raftcore", partition=str(p))
                for p in range(3)
            }
            assert hws[1] >= appended.last_offset + 1 >= 50
            # only their leaders' control records (or not known yet on this follower of them)
            assert all(hws[p] is None or hws[p] < 50 for p in (0, 2)), hws

    run(main())


def test_past_metrics_max_partitions_the_other_partitions_are_left_out_and_counted(tmp_path):
    """The bound on cardinality: the lowest metrics_max_partitions partitions are labelled,
    the same ones at every scrape; the rest have no series, and one gauge counts them."""

    async def main():
        async with cluster(tmp_path, **METRICS, size=1, partitions=3, metrics_max_partitions=2) as (
            node,
        ):
            await wait_until(
                lambda: all(g.is_leader() for g in node.groups.values()),
                what="the lone voter leading every partition",
            )
            first = scrape(node)
            again = scrape(node)
            return first, again, node.metrics_text().decode()

    first, again, text = run(main())
    for m in (first, again):
        assert partitions_labelled(m) == {"0", "1"}
        assert value(m, "raftcore_metrics_partitions_omitted") == 1
        assert value(m, "raftcore_raft_role", topic="raftcore", partition="1", role="leader") == 1
        assert value(m, "raftcore_connections", connection="inbound") is not None  # node-wide
    assert exposed_names(text) == documented_names()  # every name still there


def test_a_one_partition_node_keeps_every_name_with_its_series_labelled_partition_0(tmp_path):
    """Dashboards query today's names: a node of one partition exposes the same names as one
    of three, and each per-partition series is partition 0's."""

    async def main():
        async with cluster(tmp_path, **METRICS, size=1) as (node,):
            await leader_of([node])
            return node.metrics_text().decode()

    text = run(main())
    m = metric_samples(text)
    assert partitions_labelled(m) == {"0"}
    assert value(m, "raftcore_raft_high_watermark", **P0) is not None
    assert value(m, "raftcore_metrics_partitions_omitted") == 0
    assert exposed_names(text) == documented_names()
    for family in text_string_to_metric_families(text):  # node-wide ones stay unlabelled
        if family.name.startswith(
            ("raftcore_network_", "raftcore_kafka_request", "raftcore_conn", "raftcore_queued")
        ):
            assert all("partition" not in s.labels for s in family.samples), family.name


def test_metrics_max_partitions_below_zero_is_refused(tmp_path):
    with pytest.raises(ValueError, match="metrics max partitions must be >= 0, got -1"):
        NodeConfig(node_id=1, voters={1: Endpoint("127.0.0.1", 9092)}, data_dir=tmp_path,
                   cluster_id=CLUSTER_ID, metrics_max_partitions=-1)  # fmt: skip


def test_the_metrics_server_answers_only_metrics_and_stops_with_the_node(tmp_path):
    async def main():
        async with cluster(tmp_path, **METRICS, size=1) as (node,):
            url = url_of(node)
            status, _ = await http_get(url.replace("/metrics", "/nope"))
            assert status == 404
            status, _ = await http_get(url, data=b"x")
            assert status == 405
            status, text = await http_get(url)
            assert status == 200 and "raftcore_raft_epoch" in text
            await node.stop()
            with pytest.raises(OSError):
                await asyncio.wait_for(asyncio.open_connection(*node.metrics_address), 5)

    run(main())


async def one_past_the_bound(server, host: str, port: int) -> None:  # type: ignore[no-untyped-def]
    """Hold MAX_CONNECTIONS idle connections to the metrics port until every one is counted,
    then scrape: the scrape is answered, the oldest idle connection is closed to make room,
    and no more than MAX_CONNECTIONS are ever counted. The idle ones are closed after."""
    from raftcore.node.metrics_http import MAX_CONNECTIONS

    idle = [await asyncio.open_connection(host, port) for _ in range(MAX_CONNECTIONS)]
    try:
        await wait_until(lambda: len(server._handlers) == MAX_CONNECTIONS, what="every one counted")
        status, text = await http_get(f"http://{host}:{port}/metrics")
        assert status == 200 and "raftcore" in text
        assert len(server._handlers) <= MAX_CONNECTIONS
        oldest, _ = idle[0]
        assert await asyncio.wait_for(oldest.read(), 5) == b""  # closed for the scrape
        for reader, _ in idle[1:]:  # the others are still open
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(reader.read(), 0.01)
    finally:
        for _, w in idle:
            w.close()


def test_idle_metrics_connections_at_the_bound_make_room_for_a_scrape_oldest_first():
    """Every resource has a bound: connections to the metrics port hold at most
    MAX_CONNECTIONS handlers (and descriptors, which the Kafka listener needs). Sixteen idle
    connections used to make every scrape fail; now a new connection at the bound closes the
    oldest one that has not sent a request, and is served."""
    from raftcore.node.metrics_http import MADE_ROOM, MetricsServer

    async def main():
        server = MetricsServer(lambda: b"raftcore_up 1\n")
        host, port = await server.start("127.0.0.1", 0)
        await one_past_the_bound(server, host, port)
        assert server.closed[MADE_ROOM] == 1 and server.refused == 0
        await wait_until(lambda: not server._handlers, what="the idle connections to end")
        status, text = await http_get(f"http://{host}:{port}/metrics")
        assert status == 200 and "raftcore_up 1" in text
        await server.close()

    run(main())


def test_a_metrics_connection_that_sends_no_whole_request_in_time_is_closed():
    """A connection that sent nothing, or only part of a request head, within the request
    timeout is closed and counted: idle connections do not stay for the exchange timeout."""
    from raftcore.node.metrics_http import REQUEST_TIMEOUT, MetricsServer

    async def main():
        server = MetricsServer(lambda: b"raftcore_up 1\n", request_timeout_s=0.2)
        host, port = await server.start("127.0.0.1", 0)
        silent = await asyncio.open_connection(host, port)
        partial = await asyncio.open_connection(host, port)
        partial[1].write(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")  # no blank line yet
        for reader, writer in (silent, partial):
            assert await asyncio.wait_for(reader.read(), 5) == b""
            writer.close()
        assert server.closed[REQUEST_TIMEOUT] == 2
        status, _ = await http_get(f"http://{host}:{port}/metrics")  # a prompt one is served
        assert status == 200
        await server.close()

    run(main())


def test_a_new_metrics_connection_is_refused_only_while_every_open_one_is_being_answered():
    """The one refusal left: at the bound, with no connection waiting for its request to close,
    the new one is closed as it is accepted and counted in refused. A client that asks and
    does not read holds its connection in the answer (16 MiB here: more than the kernel's
    buffers take, so the write waits for it)."""
    from raftcore.node.metrics_http import MADE_ROOM, MetricsServer

    body = b"#" * (16 * 1024 * 1024)

    async def main():
        server = MetricsServer(lambda: body, max_connections=1)
        host, port = await server.start("127.0.0.1", 0)
        _, writer = await asyncio.open_connection(host, port)
        writer.write(b"GET /metrics HTTP/1.1\r\n\r\n")  # and never read
        await wait_until(lambda: server._handlers and not server._waiting, what="it to be answered")
        other, other_writer = await asyncio.open_connection(host, port)
        assert await asyncio.wait_for(other.read(), 5) == b""
        other_writer.close()
        assert server.refused == 1 and server.closed[MADE_ROOM] == 0
        writer.close()  # the answer's write fails, its slot is free again
        await wait_until(lambda: not server._handlers, what="the reader-less connection to end")
        server.render = lambda: b"raftcore_up 1\n"
        status, _ = await http_get(f"http://{host}:{port}/metrics")
        assert status == 200
        await server.close()

    run(main())


def test_metrics_connections_closed_for_a_scrape_or_refused_are_counted_in_the_node_s_metrics(
    tmp_path,
):
    async def main():
        async with cluster(tmp_path, **METRICS, size=1) as (node,):
            server = node.metrics_server
            assert server is not None
            made_room = "raftcore_metrics_connections_closed_total"
            assert value(scrape(node), made_room, reason="made_room") == 0
            await one_past_the_bound(server, *node.metrics_address)
            m = scrape(node)
            assert value(m, made_room, reason="made_room") == 1
            assert value(m, made_room, reason="request_timeout") == 0
            assert value(m, "raftcore_metrics_connections_refused_total") == 0
            server.refused += 1  # what a refusal counts (the test above makes one)
            assert value(scrape(node), "raftcore_metrics_connections_refused_total") == 1

    run(main())


def test_a_metrics_port_in_use_fails_the_start_naming_the_port_and_leaves_nothing_open(tmp_path):
    async def main():
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            port = taken.getsockname()[1]
            (listen,) = free_ports(1)
            config = NodeConfig(
                node_id=1,
                voters={1: Endpoint("127.0.0.1", listen)},
                data_dir=tmp_path / "node",
                cluster_id=CLUSTER_ID,
                metrics_port=port,
            )
            node = RaftNode(config)
            with pytest.raises(RaftcoreError, match=f"cannot serve metrics on 127.0.0.1:{port}"):
                await node.start()
            assert node.log is not None and node.log.closed  # the log's directory lock is free
            with socket.socket() as s:  # and the Kafka listener is closed again
                s.bind(("127.0.0.1", listen))

    run(main())


# ---- docs/metrics.md ---------------------------------------------------------------------------


def exposed_names(text: str) -> set[str]:
    """The metric names a user queries: counters with ``_total``, histograms by their base
    name; prometheus_client's ``_created`` series left out."""
    names = set()
    for family in text_string_to_metric_families(text):
        if family.name.endswith("_created"):
            continue
        names.add(family.name + "_total" if family.type == "counter" else family.name)
    return names


def documented_names() -> set[str]:
    """The names in the first column of docs/metrics.md's tables."""
    return set(re.findall(r"^\| `(raftcore_[a-z_]+)`", DOC.read_text(), re.MULTILINE))


def test_docs_list_exactly_the_metrics_a_node_exposes(tmp_path):
    async def main():
        async with cluster(tmp_path, **METRICS, size=1) as (node,):
            await leader_of([node])
            return node.metrics_text().decode()

    exposed = exposed_names(run(main()))
    documented = documented_names()
    assert len(exposed) > 30
    assert exposed - documented == set(), "exposed but not in docs/metrics.md"
    assert documented - exposed == set(), "in docs/metrics.md but not exposed"


# ---- processes ---------------------------------------------------------------------------------


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def _node_command(tmp_path: Path, metrics_port: int) -> list[str]:
    (listen,) = free_ports(1)
    formatted(tmp_path / "node", cluster_id="metrics-process")
    return [
        sys.executable,
        "-m",
        "raftcore",
        "node",
        "--id",
        "1",
        "--voters",
        f"1@127.0.0.1:{listen}",
        "--data-dir",
        str(tmp_path / "node"),
        "--cluster-id=metrics-process",
        "--metrics-port",
        str(metrics_port),
        "--ready-file",
        str(tmp_path / "ready"),
    ]


def test_node_process_serves_prometheus_text_at_metrics_port(tmp_path):
    (port,) = free_ports(1)
    proc = subprocess.Popen(
        _node_command(tmp_path, port),
        cwd=tmp_path,
        env=_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 30
        while not (tmp_path / "ready").exists():
            assert proc.poll() is None, proc.stderr.read().decode()  # type: ignore[union-attr]
            assert time.monotonic() < deadline, "the node did not start"
            time.sleep(0.05)
        while True:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                assert r.status == 200
                assert r.headers["Content-Type"].startswith("text/plain")
                text = r.read().decode()
            lines = [ln for ln in text.splitlines() if not ln.startswith("#")]
            assert lines and all(ln.startswith("raftcore_") for ln in lines)
            if 'raftcore_raft_role{partition="0",role="leader",topic="raftcore"} 1.0' in lines:
                break
            assert time.monotonic() < deadline, "the lone voter never led"
            time.sleep(0.1)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        proc.stderr.close()  # type: ignore[union-attr]


def test_node_process_with_metrics_max_partitions_0_labels_no_partition_and_counts_it(tmp_path):
    (port,) = free_ports(1)
    argv = [*_node_command(tmp_path, port), "--metrics-max-partitions", "0"]
    proc = subprocess.Popen(
        argv, cwd=tmp_path, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        deadline = time.monotonic() + 30
        while not (tmp_path / "ready").exists():
            assert proc.poll() is None, proc.stderr.read().decode()  # type: ignore[union-attr]
            assert time.monotonic() < deadline, "the node did not start"
            time.sleep(0.05)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            m = metric_samples(r.read().decode())
        assert value(m, "raftcore_metrics_partitions_omitted") == 1
        assert partitions_labelled(m) == set()
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        proc.stderr.close()  # type: ignore[union-attr]


def test_node_process_with_its_metrics_port_in_use_exits_with_one_line(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        try:
            done = subprocess.run(
                _node_command(tmp_path, port),
                check=False,
                cwd=tmp_path,
                env=_env(),
                capture_output=True,
                text=True,
                timeout=30,
            )
        except subprocess.TimeoutExpired:  # run() killed it
            pytest.fail("the node kept running with its metrics port taken")
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    said = [ln for ln in done.stderr.splitlines() if "cannot serve metrics" in ln]
    assert len(said) == 1, done.stderr
    assert f"cannot serve metrics on 127.0.0.1:{port}" in said[0]
    assert said[0].startswith("raftcore node:")
    assert said[0].endswith("Address already in use")


@pytest.mark.timeout(120)
def test_describe_quorum_watch_prints_a_table_per_interval_and_exits_0_on_ctrl_c(tmp_path):
    with LocalCluster(
        tmp_path / "cluster",
        3,
        node_args=["--election-timeout-ms", "500", "--fetch-timeout-ms", "1000"],
        env=_env(),
    ) as lc:
        lc.start()
        out = tmp_path / "watch.out"
        with open(out, "wb") as stdout:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "raftcore",
                    "describe-quorum",
                    "--bootstrap",
                    ",".join(lc.bootstrap),
                    "--watch",
                    "--interval",
                    "0.5",
                ],
                cwd=tmp_path,
                env=_env(),
                stdout=stdout,
                stderr=subprocess.PIPE,
            )
        try:
            deadline = time.monotonic() + 40
            while out.read_text().count("LeaderId:") < 2:
                assert proc.poll() is None, proc.stderr.read().decode()  # type: ignore[union-attr]
                assert time.monotonic() < deadline, out.read_text()
                time.sleep(0.1)
            os.kill(proc.pid, signal.SIGINT)
            status = proc.wait(15)
            stderr = proc.stderr.read().decode()  # type: ignore[union-attr]
        finally:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(10)
            proc.stderr.close()  # type: ignore[union-attr]
    assert status == 0, stderr
    assert "Traceback" not in stderr
    text = out.read_text()
    tables = text.split("\nEvery ")  # each starts with its header line; a blank line before
    assert len(tables) >= 2
    assert all(t.endswith("\n\n") for t in text.split("Every ")[1:-1])
    assert "\x1b[" not in text  # not a terminal: no screen redraw
    for table in tables:
        assert "Lag" in table and "LastCaughtUpTimestamp" in table


def test_snapshots_taken_and_loaded_are_counted_and_timed(tmp_path):
    """A lone voter with a state machine takes snapshots (every 100 records); restarted with
    an empty state machine, it loads the latest one."""

    async def main():
        (port,) = free_ports(1)
        config = NodeConfig(
            node_id=1,
            voters={1: Endpoint("127.0.0.1", port)},
            data_dir=tmp_path / "node",
            cluster_id=CLUSTER_ID,
            quorum=dataclasses.replace(FAST, snapshot_min_records=100),
        )
        node = RaftNode(config, state_machine=DictStateMachine())
        await node.start()
        try:
            await leader_of([node])
            for i in range(0, 1000, 50):
                await node.append([(b"k%d" % j, b"v") for j in range(i, i + 50)], wait=True)
            assert node.snapshotter is not None
            await wait_until(lambda: node.snapshotter.taken >= 2, 20, what="two snapshots")
            m = scrape(node)
            taken = node.snapshotter.taken
            assert value(m, "raftcore_snapshots_taken_total", **P0) == taken
            assert value(m, "raftcore_snapshot_duration_seconds_count", operation="take") == taken
            assert value(m, "raftcore_snapshots", **P0) >= 1
            assert node.log is not None
            latest = node.log.latest_snapshot_id()
            assert value(m, "raftcore_snapshot_latest_end_offset", **P0) == latest.offset
        finally:
            await node.stop()
        again = RaftNode(config, state_machine=DictStateMachine())  # empty: loads the snapshot
        await again.start()
        try:
            await wait_until(
                lambda: (
                    value(
                        scrape(again), "raftcore_snapshot_duration_seconds_count", operation="load"
                    )
                    == 1
                ),
                10,
                "the snapshot loaded",
            )
            assert (
                value(scrape(again), "raftcore_statemachine_applied_offset", **P0) >= latest.offset
            )
        finally:
            await again.stop()

    run(main())
