"""``raftcore node --event-loop uvloop``: the same node on uvloop's event loop (libuv) -- the
framing (BufferedProtocol), TLS, replication, a leader's SIGKILL and the acknowledgements must
all hold there as on asyncio's. Real processes; every one ended by its pid."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest
from cluster_helpers import FAST, consume_all, key, produce, quorum, run

from raftcore.client import Consumer, Producer
from raftcore.node import runner
from raftcore.node.local_cluster import LocalCluster
from raftcore.security.certs import make_certs

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

UVLOOP = ["--event-loop", "uvloop"]


def _uvloop_installed() -> None:
    pytest.importorskip("uvloop", reason="the uvloop package is not installed")


def _closed(cluster: LocalCluster) -> None:
    cluster.close()
    for pid in cluster.started_pids:  # every process started is gone
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_a_cluster_on_uvloop_commits_survives_a_leader_kill_and_serves_every_record(tmp_path):
    _uvloop_installed()
    cluster = LocalCluster(tmp_path / "cluster", 3, node_args=[*FAST, *UVLOOP])
    try:
        cluster.start()

        async def before() -> object:
            await produce(cluster.bootstrap, 0, 300)
            # one large batch too: a request frame over 64 KiB takes the framer's own buffer
            async with Producer(cluster.bootstrap) as producer:
                await producer.send([(b"big-%d" % i, b"v" * 200) for i in range(1000)])
            return await quorum(cluster)

        info = run(before())
        for node_id in cluster.node_ids:  # each node says which loop it runs on
            assert "event loop uvloop)" in cluster.log_file(node_id).read_text()
        cluster.kill(info.leader_id, signal.SIGKILL)  # type: ignore[attr-defined]

        async def after() -> tuple[object, list[bytes]]:
            await produce(cluster.bootstrap, 300, 300)
            return await quorum(cluster), await consume_all(cluster.bootstrap, 1600)

        new_info, keys = run(after())
        assert new_info.leader_id != info.leader_id  # type: ignore[attr-defined]
        ours = [k for k in keys if not k.startswith(b"big-")]
        assert ours == [key(n) for n in range(600)]
        assert len(keys) == 1600
    finally:
        _closed(cluster)


def test_mutual_tls_works_on_uvloop(tmp_path):
    _uvloop_installed()
    certs = tmp_path / "tls"
    make_certs(certs, [1, 2, 3], clients=["alice"])
    cluster = LocalCluster(tmp_path / "cluster", 3, node_args=[*FAST, *UVLOOP], tls_dir=certs)
    try:
        cluster.start()
        security = cluster.client_security("alice")

        async def round_trip() -> list[bytes]:
            async with Producer(cluster.bootstrap, security=security) as producer:
                for n in range(20):
                    await producer.send([(key(n), b"x" * 100_000 if n == 7 else b"x")])
            got: list[bytes] = []
            async with Consumer(cluster.bootstrap, security=security) as consumer:
                while len(got) < 20:
                    got += [r.key for r in await asyncio.wait_for(consumer.poll(), 30)]
            return got

        assert run(round_trip()) == [key(n) for n in range(20)]
        assert all("event loop uvloop)" in cluster.log_file(n).read_text() for n in (1, 2, 3))
    finally:
        _closed(cluster)


def test_uvloop_asked_for_without_the_package_is_a_one_line_error(monkeypatch):
    real = runner.importlib.util.find_spec
    monkeypatch.setattr(
        runner.importlib.util,
        "find_spec",
        lambda name, *a: None if name == "uvloop" else real(name, *a),
    )
    with pytest.raises(ValueError, match="pip install uvloop"):
        runner.check_event_loop("uvloop")
    runner.check_event_loop("asyncio")  # always there
    with pytest.raises(ValueError, match="unknown event loop"):
        runner.check_event_loop("trio")
