"""The embedding API: one import path, writes from any replica, reads of a replica's own
committed log, the key/value store's range, prefix and watch reads, its listener, a library
that prints nothing unasked, a prompt stop."""

from __future__ import annotations

import asyncio
import contextlib
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_node import configs, leader_of, run

from raftcore.embed import (
    Change,
    KeyValueStore,
    NotLeaderError,
    OffsetOutOfRangeError,
    RaftNode,
)
from raftcore.kv import prefix_end
from raftcore.node.local_cluster import free_ports

pytestmark = pytest.mark.timeout(60)


@contextlib.asynccontextmanager
async def stores(tmp_path: Path, **kw):  # type: ignore[no-untyped-def]
    kvs = [KeyValueStore(cfg, sync=False, **kw) for cfg in configs(tmp_path)]
    try:
        await asyncio.gather(*(kv.start() for kv in kvs))
        leader = await leader_of([kv.node for kv in kvs])
        yield kvs, kvs[leader.node_id - 1]
    finally:
        await asyncio.gather(*(kv.stop() for kv in kvs))


def followers(kvs: list[KeyValueStore], leader: KeyValueStore) -> list[KeyValueStore]:
    return [kv for kv in kvs if kv is not leader]


def test_a_put_on_a_follower_is_forwarded_to_the_leader_and_refused_only_when_asked(tmp_path):
    async def main() -> None:
        async with stores(tmp_path) as (kvs, leader):
            follower = followers(kvs, leader)[0]
            offset = await follower.put(b"k", b"v", timeout_s=5.0)
            assert follower.get_local(b"k") == b"v"  # applied here when put returns
            for kv in kvs:
                await kv.wait_applied(offset)
                assert kv.get_local(b"k") == b"v"
            with pytest.raises(NotLeaderError) as err:
                await follower.put(b"k", b"w", forward=False)
            assert err.value.leader.leader_id == leader.node_id
            assert await leader.get(b"k", linearizable=True) == b"v"

    run(main())


def test_writes_forwarded_while_the_leader_writes_too_hold_no_fetch_back(tmp_path):
    """A forwarded write (an acks=all Produce) is answered only once the followers fetch past
    it; sent on the connection that carries the follower's Fetches, it held their answers
    back (a connection's requests are answered in order), the leader lost its followers for
    a fetch timeout and an election followed. Every replica writing at once: all committed,
    in one epoch."""

    async def main() -> None:
        async with stores(tmp_path) as (kvs, leader):
            epoch = leader.node.core.epoch

            async def writer(kv: KeyValueStore) -> None:
                for i in range(20):
                    await kv.put(b"%d-%d" % (kv.node.node_id, i), b"v", timeout_s=10.0)

            await asyncio.gather(*(writer(kv) for kv in kvs))
            assert leader.node.core.epoch == epoch and leader.node.core.is_leader
            assert len(await leader.range(linearizable=True)) == 60

    run(main())


def test_a_linearizable_read_on_a_follower_sees_every_write_acknowledged_before_it(tmp_path):
    """The follower asks the leader for its read index (ReadIndex) and waits until it has
    applied that far: a write acknowledged by the leader a moment ago is seen at once."""

    async def main() -> None:
        async with stores(tmp_path) as (kvs, leader):
            for follower in followers(kvs, leader):
                for n in range(20):
                    await leader.put(b"k", b"%d" % n)
                    assert await follower.get(b"k", linearizable=True) == b"%d" % n
                    assert await follower.prefix(b"k", linearizable=True) == [(b"k", b"%d" % n)]
            follower = followers(kvs, leader)[0]
            offset = await leader.put(b"last", b"1")
            read = await follower.node.read(offset, linearizable=True)
            assert [(r.key, r.value) for r in read] == [(b"last", b"1")]

    run(main())


def test_a_node_reads_its_own_committed_log_and_names_the_log_start_below_it(tmp_path):
    async def main() -> None:
        nodes = [RaftNode(cfg) for cfg in configs(tmp_path)]
        try:
            await asyncio.gather(*(n.start() for n in nodes))
            leader = await leader_of(nodes)
            follower = next(n for n in nodes if n is not leader)
            first, last = await follower.write([(b"a", b"1"), (b"b", b"2")], timeout_s=5.0)
            assert last == first + 1
            records = follower.records(first)
            seen = [await anext(records), await anext(records)]
            assert [(r.offset, r.key, r.value) for r in seen] == [
                (first, b"a", b"1"),
                (first + 1, b"b", b"2"),
            ]
            read = await leader.read(first, linearizable=True)
            assert [(r.key, r.value) for r in read][:2] == [(b"a", b"1"), (b"b", b"2")]
            assert await follower.read(follower.high_watermark) == []
            with pytest.raises(OffsetOutOfRangeError, match=r"outside the committed log \[0, "):
                await follower.read(follower.high_watermark + 5)
        finally:
            await asyncio.gather(*(n.stop(timeout_s=0.5) for n in nodes))

    run(main())


def test_range_and_prefix_reads_return_pairs_in_key_order_within_their_bounds(tmp_path):
    async def main() -> None:
        async with stores(tmp_path) as (_, leader):
            await leader.put_many(
                [(b"a", b"0"), (b"user/b", b"2"), (b"user/a", b"1"), (b"user0", b"x"), (b"z", b"9")]
            )
            assert await leader.prefix(b"user/") == [(b"user/a", b"1"), (b"user/b", b"2")]
            assert await leader.range(b"b", b"user0") == [(b"user/a", b"1"), (b"user/b", b"2")]
            assert await leader.range(limit=2) == [(b"a", b"0"), (b"user/a", b"1")]
            assert await leader.range(b"user0") == [(b"user0", b"x"), (b"z", b"9")]
            assert await leader.prefix(b"user/", linearizable=True, limit=1) == [(b"user/a", b"1")]

    run(main())


def test_prefix_end_is_the_least_key_above_the_prefix():
    assert prefix_end(b"user/") == b"user0"
    assert prefix_end(b"a\xff\xff") == b"b"
    assert prefix_end(b"\xff") is None


def test_a_watch_gives_each_change_under_its_prefix_from_an_applied_offset(tmp_path):
    async def main() -> None:
        async with stores(tmp_path) as (kvs, leader):
            follower = followers(kvs, leader)[0]
            early = await leader.put(b"user/old", b"0")
            await follower.wait_applied(early)
            changes = follower.watch(b"user/")  # from now on
            await leader.put(b"other", b"x")
            put = await leader.put(b"user/ada", b"1")
            deleted = await follower.delete(b"user/ada")
            assert await anext(changes) == Change(put, b"user/ada", b"1")
            change = await anext(changes)
            assert change == Change(deleted, b"user/ada", None)
            assert follower.applied_offset > change.offset  # applied before it is told
            replay = follower.watch(b"user/", from_offset=early)
            assert (await anext(replay)).key == b"user/old"

    run(main())


def test_the_stores_listener_gets_every_change_applied_on_its_replica(tmp_path):
    seen: list[Change] = []

    async def main() -> None:
        async with stores(tmp_path, listener=seen.append) as (_, leader):
            last = await leader.put_many([(b"x", b"1"), (b"y", None)])
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 10
            while len(seen) < 6 and loop.time() < deadline:
                await asyncio.sleep(0.01)
        assert sorted((c.key, c.value, c.offset) for c in seen) == sorted(
            (k, v, o)
            for k, v, o in [(b"x", b"1", last.first_offset), (b"y", None, last.last_offset)] * 3
        )

    run(main())


def test_a_library_warning_prints_nothing_when_the_application_configured_no_logging():
    code = (
        "import logging, raftcore.node.node\n"
        "logging.getLogger('raftcore.node.node').warning('cannot reach voter 2; retrying')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0
    assert done.stderr == ""


def test_a_leader_left_alone_stops_within_a_second(tmp_path):
    async def main() -> None:
        async with stores(tmp_path) as (kvs, leader):
            await asyncio.gather(*(kv.stop() for kv in followers(kvs, leader)))
            assert leader.node.is_leader()  # not yet resigned: check-quorum takes longer
            started = time.monotonic()
            await leader.stop()
            assert time.monotonic() - started < 1.0

    run(main())


DOCS = Path(__file__).resolve().parent.parent / "docs" / "embedding.md"


def docs_service() -> str:
    text = DOCS.read_text(encoding="utf-8")
    match = re.search(
        r"<!-- docs-test: python embedded-service -->\s*```python\n(.*?)```", text, re.DOTALL
    )
    assert match, "docs/embedding.md lost its embedded-service block"
    return match.group(1)


@pytest.mark.slow
def test_the_docs_service_writes_through_a_follower_watches_and_stops_within_a_second(
    tmp_path, capsys
):
    code = docs_service()
    assert len(code.splitlines()) < 40
    body, run_line = code.rstrip().rsplit("\n", 1)
    assert run_line.startswith("asyncio.run(main(")
    namespace: dict = {"__name__": "docs_example"}
    exec(compile(body, str(DOCS), "exec"), namespace)
    asyncio.run(asyncio.wait_for(namespace["main"](str(tmp_path), tuple(free_ports(3))), 45))
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert sorted(lines[:3]) == ["1 b'Lovelace'", "2 b'Lovelace'", "3 b'Lovelace'"]
    assert lines[3] == "[(b'user/ada', b'Lovelace'), (b'user/alan', b'Turing')]"
    assert lines[4:6] == ["watched b'user/ada' b'Lovelace'", "watched b'user/alan' b'Turing'"]
    stopped = float(re.fullmatch(r"stopped in ([0-9.]+) s", lines[6]).group(1))  # type: ignore[union-attr]
    assert stopped < 1.0
    assert err == ""  # nothing printed by the library: the test configured no handler of its own
