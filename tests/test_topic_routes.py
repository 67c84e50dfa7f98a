"""Topics created at run time, as the Kafka API and the wire see them beside the metadata:
the Raft RPCs of the groups beside the node's own topic (UpdateRaftVoter, parked fetches of a
deleted topic, peers without a group), DescribeConfigs and the errors for a partition led
elsewhere, and ``raftcore topic``. In process; the helpers are tests/test_topics.py's."""

from __future__ import annotations

import asyncio

import pytest
from test_node import cluster, leader_of, raw_request, run
from test_topics import (
    controller_of,
    create_at,
    delete_at,
    opened,
    replicas_of,
    wait_until,
)

from raftcore.error_codes import Errors
from raftcore.protocol.api import ApiKey, request_spec
from raftcore.topic_partition import TopicPartition

pytestmark = pytest.mark.timeout(90)


# ---- the Raft RPCs of the groups beside the node's own topic -----------------------------------


def test_only_partition_0_of_the_nodes_own_topic_sends_update_raft_voter(tmp_path):
    """UpdateRaftVoter names no partition: the peer hands it to partition 0 of its own topic,
    whose leader and epoch another group's core would take for its own (the metadata group
    turned observer when it did). The metadata group's and a created topic's are not sent."""
    import itertools
    from types import SimpleNamespace

    from test_node import configs

    from raftcore.node.messaging import Messaging
    from raftcore.node.peers import AddressBook
    from raftcore.raft.messages import Outbound, UpdateVoterRequest

    cfg = configs(tmp_path)[0]
    sent: list[bytes] = []
    messaging = Messaging(
        cfg,
        prefix="[node 1]",
        address_book=AddressBook(cfg),
        metrics=SimpleNamespace(peer_sent_bytes=0, peer_received_bytes=0),  # type: ignore[arg-type]
        kafka=None,  # type: ignore[arg-type]
        sasl=None,
        groups={},
        admin_handle=lambda header, body: None,  # type: ignore[arg-type,return-value]
        correlation_ids=itertools.count(1),
    )
    messaging.peers = SimpleNamespace(  # type: ignore[assignment]
        get=lambda peer: SimpleNamespace(send=lambda frames: sent.extend(frames) or True)
    )
    lost: list[TopicPartition] = []

    async def main() -> None:
        messaging._loop = asyncio.get_running_loop()
        messaging._not_sent = lambda name, peer, cid: lost.append(name)  # type: ignore[method-assign]
        update = UpdateVoterRequest(cfg.cluster_id, 3, 1, bytes(range(16)), None)
        for name in (
            TopicPartition("__cluster_metadata", 0),
            TopicPartition("orders", 0),
            TopicPartition("raftcore", 0),
        ):
            messaging.send(name, Outbound(2, 7, update, -1, True))
        await asyncio.sleep(0)

    run(main())
    assert lost == [TopicPartition("__cluster_metadata", 0), TopicPartition("orders", 0)]
    assert len(sent) == 1


# ---- the command line -------------------------------------------------------------------------


def test_raftcore_topic_creates_lists_describes_and_deletes_a_topic(tmp_path, capsys):
    """``raftcore topic`` (in process: the CLI's own event loop in a thread), asking any node:
    create and delete go to the controller that Metadata names."""
    from raftcore.cli import main

    async def cli(*argv: str) -> tuple[int, str]:
        code = await asyncio.to_thread(main, ["topic", *argv])
        return code, capsys.readouterr().out

    async def go() -> None:
        async with cluster(tmp_path) as nodes:
            await controller_of(nodes)
            boot = f"--bootstrap={nodes[0].config.listen}"
            code, out = await cli(
                "create", boot, "--topic=clicks", "--partitions=3", "--replication-factor=2",
                "--config", "retention.ms=60000",
            )  # fmt: skip
            assert (code, out) == (
                0,
                "topic clicks created: 3 partition(s), replication factor 2\n",
            )
            code, out = await cli("create", boot, "--topic=clicks", "--partitions=1")
            assert code == 1 and out.startswith("TOPIC_ALREADY_EXISTS: topic clicks already")
            code, out = await cli("create", boot, "--topic=wide", "--replication-factor=4")
            assert code == 1 and out.startswith("INVALID_REPLICATION_FACTOR: ")
            await opened(nodes, "clicks", 3)
            assert await cli("list", boot) == (0, "clicks\nraftcore\n")
            code, out = await cli("describe", boot, "--topic=clicks")
            lines = out.splitlines()
            assert code == 0 and lines[0].startswith("Topic: clicks\tTopicId: ")
            assert lines[0].endswith("\tPartitionCount: 3\tReplicationFactor: 2")
            placement = replicas_of(nodes, "clicks")
            for p, line in enumerate(lines[1:]):
                replicas = ",".join(map(str, placement[p]))
                assert f"\tPartition: {p}\tLeader: " in line
                assert line.endswith(f"\tReplicas: {replicas}\tIsr: {replicas}")
            assert nodes[0].metadata.image.topic("clicks").configs["retention.ms"] == "60000"
            assert await cli("delete", boot, "--topic=clicks") == (0, "topic clicks deleted\n")
            # the node asked learns of the deletion with its next fetch of the metadata log
            await wait_until(
                lambda: nodes[0].metadata.image.topic("clicks") is None, "the deletion applied"
            )
            code, out = await cli("describe", boot, "--topic=clicks")
            assert (code, out) == (1, "Topic: clicks\tUNKNOWN_TOPIC_OR_PARTITION\n")

    run(go())


def test_deleting_a_topic_answers_its_parked_fetches_so_no_other_group_loses_its_leader(tmp_path):
    """A connection answers in the order it was asked: a follower's fetch parked at a leader
    whose group then closes (its topic deleted) is answered UNKNOWN_TOPIC_ID at once, else it
    would hold back the answers to every later request on that connection, the metadata
    group's fetches too, until they time out and the followers elect another controller."""

    async def main() -> None:
        async with cluster(tmp_path) as nodes:
            await leader_of(nodes)
            assert (await create_at(nodes, "brief", 6, 3)).error_code == Errors.NONE
            await opened(nodes, "brief", 6)
            controller = await controller_of(nodes)
            epochs = [(n.metadata.group.core.epoch, n.group.core.epoch) for n in nodes]
            assert (await delete_at(nodes, "brief")).error_code == Errors.NONE
            await wait_until(
                lambda: not any(tp.topic == "brief" for n in nodes for tp in n.extra_groups),
                "every replica of brief closed",
            )
            await asyncio.sleep(2.5)  # over two fetch timeouts of the test's quorum
            assert [(n.metadata.group.core.epoch, n.group.core.epoch) for n in nodes] == epochs
            assert controller.metadata.is_controller()

    run(main())


def test_describe_configs_of_a_created_topic_reports_what_its_replicas_run_with(tmp_path):
    """Its own configs are stored, not applied yet: the node's settings, as for its own topic,
    on every node (those without a replica too)."""

    async def main() -> None:
        async with cluster(tmp_path) as nodes:
            await controller_of(nodes)
            assert (await create_at(nodes, "conf", 1, 1)).error_code == Errors.NONE
            await opened(nodes, "conf", 1)
            cls = request_spec(ApiKey.DESCRIBE_CONFIGS).cls
            for n in nodes:
                body = cls(
                    resources=[cls.DescribeConfigsResource(resource_type=2, resource_name="conf")]
                )
                (result,) = (await raw_request(n, ApiKey.DESCRIBE_CONFIGS, 4, body)).results  # type: ignore[attr-defined]
                assert result.error_code == Errors.NONE, n.node_id
                configs = {c.name: c.value for c in result.configs}
                assert configs["segment.bytes"] == str(n.config.log.segment_bytes)

    run(main())


def test_a_partition_led_elsewhere_is_not_leader_and_one_the_cluster_lacks_is_unknown(tmp_path):
    """Produce, ListOffsets and Fetch find a partition by (topic, partition): on a node
    without a replica of it, NOT_LEADER_OR_FOLLOWER when the cluster has it (the client asks
    Metadata again, which names its leader), UNKNOWN_TOPIC_OR_PARTITION when it does not."""
    from kafka_helpers import batch

    async def main() -> None:
        async with cluster(tmp_path) as nodes:
            await controller_of(nodes)
            assert (await create_at(nodes, "single", 3, 1)).error_code == Errors.NONE
            placement = await opened(nodes, "single", 3)
            await wait_until(lambda: all(n.metadata.caught_up() for n in nodes), "caught up")
            node = nodes[0]
            elsewhere = next(p for p, r in placement.items() if node.node_id not in r)
            offsets = request_spec(ApiKey.LIST_OFFSETS).cls
            produce = request_spec(ApiKey.PRODUCE).cls
            fetch = request_spec(ApiKey.FETCH).cls
            topic_id = node.metadata.image.topic("single").topic_id.raw
            for index, error in (
                (elsewhere, Errors.NOT_LEADER_OR_FOLLOWER),
                (7, Errors.UNKNOWN_TOPIC_OR_PARTITION),
            ):
                body = offsets(
                    replica_id=-1,
                    isolation_level=0,
                    topics=[
                        offsets.ListOffsetsTopic(
                            name="single",
                            partitions=[
                                offsets.ListOffsetsPartition(partition_index=index, timestamp=-1)
                            ],
                        )
                    ],
                )
                answer = await raw_request(node, ApiKey.LIST_OFFSETS, 7, body)
                assert answer.topics[0].partitions[0].error_code == error  # type: ignore[attr-defined]
                body = produce(
                    acks=-1,
                    timeout_ms=2000,
                    topic_data=[
                        produce.TopicProduceData(
                            name="single",
                            partition_data=[
                                produce.PartitionProduceData(index=index, records=batch(1))
                            ],
                        )
                    ],
                )
                answer = await raw_request(node, ApiKey.PRODUCE, 9, body)
                got = answer.responses[0].partition_responses[0].error_code  # type: ignore[attr-defined]
                assert got == error, index
                body = fetch(
                    replica_id=-1,
                    max_wait_ms=0,
                    min_bytes=1,
                    max_bytes=1 << 20,
                    isolation_level=0,
                    session_id=0,
                    session_epoch=-1,
                    topics=[
                        fetch.FetchTopic(
                            topic_id=topic_id,
                            partitions=[
                                fetch.FetchPartition(
                                    partition=index,
                                    current_leader_epoch=-1,
                                    fetch_offset=0,
                                    log_start_offset=-1,
                                    partition_max_bytes=1 << 20,
                                )
                            ],
                        )
                    ],
                    forgotten_topics_data=[],
                    rack_id="",
                )
                answer = await raw_request(node, ApiKey.FETCH, 13, body)
                got = answer.responses[0].partitions[0].error_code  # type: ignore[attr-defined]
                assert got == error, index

    run(main())


def test_a_peer_without_a_group_is_asked_for_it_once_a_second_not_at_every_retry(tmp_path, caplog):
    """A node of the release before the metadata group answers every request for it
    UNKNOWN_TOPIC_OR_PARTITION and logs it; retried at the 20 ms backoff, the upgrade filled
    its log with thousands of lines a minute. A group's requests to a peer that said it has no
    such group wait a second (ABSENT_PAUSE_S) before the next one."""
    import logging

    from raftcore.node.messaging import ABSENT_PAUSE_S

    async def main() -> None:
        async with cluster(tmp_path) as nodes:
            await leader_of(nodes)
            # nodes 2 and 3 as the previous release: no metadata group to route to; node 1's
            # then stands for election over and over, asking them
            olds = nodes[1:]
            for old in olds:
                group = old.extra_groups.pop(TopicPartition("__cluster_metadata", 0))
                group.stop_timers()
                await group.close()
            await asyncio.sleep(1.5)  # node 1's metadata group lost its leader or quorum
            caplog.clear()
            with caplog.at_level(logging.INFO, logger="raftcore.node.node"):
                await asyncio.sleep(4)
            refused = [
                r
                for r in caplog.records
                if any(
                    r.getMessage().startswith(f"{old.prefix} refusing a raft request")
                    for old in olds
                )
            ]
            # two peers, about one request each per pause (and those of elections begun
            # meanwhile, held until the pause ends): 10 to 19 here; at every retry, 7,500+
            assert 1 <= len(refused) <= 2 * (4 / ABSENT_PAUSE_S) + 16, len(refused)

    run(main())


def test_an_idle_metadata_groups_parked_fetch_holds_back_no_answer_of_the_nodes_own_topic(
    tmp_path,
):
    """A node answers each connection's requests in order, and a follower's fetch of the idle
    metadata group waits at its leader up to fetch_max_wait_ms: on the connection that
    carries partition 0's fetches it held each of their answers back, and every acks=all
    append waited for it. The metadata group's requests go on connections of their own."""

    async def main() -> None:
        async with cluster(tmp_path) as nodes:
            leader = await leader_of(nodes)
            await controller_of(nodes)
            if not leader.metadata.is_controller():  # both groups led by one node
                controller = next(n for n in nodes if n.metadata.is_controller())
                group = controller.metadata.group
                core = group.core
                group.run(
                    lambda now: (
                        core.transfer_leadership(leader.node_id, 2000, now),
                        core.poll(now),
                    )[1]
                )
                await wait_until(leader.metadata.is_controller, "the controller moved")
            assert leader.is_leader()
            loop = asyncio.get_running_loop()
            started = loop.time()
            for i in range(20):
                await leader.append([(b"k", b"%d" % i)], wait=True)
            took = loop.time() - started
            wait_s = leader.config.quorum.fetch_max_wait_ms / 1000
            # behind a parked metadata fetch, each commit waited up to fetch_max_wait_ms
            assert took < 20 * wait_s / 4, took

    run(main())


def test_update_raft_voter_waits_for_a_new_peers_api_versions_answer():
    """UpdateRaftVoter may go to a peer whose ApiVersions lists it, or of which nothing is
    known; but not while the first answer of a new connection is awaited: the previous
    release closes the connection of an API it does not know (the upgrade test's
    'unknown API key 82')."""
    from raftcore.node.peer_apis import PeerApis
    from raftcore.protocol.api import ApiKey

    async def main() -> None:
        answers: dict[int, asyncio.Future[frozenset[int]]] = {}

        async def ask(peer_id: int) -> frozenset[int]:
            answers[peer_id] = asyncio.get_running_loop().create_future()
            return await answers[peer_id]

        apis = PeerApis(ask, "[node 1]")
        update = ApiKey.UPDATE_RAFT_VOTER
        assert apis.may_send(2, update)  # nothing known, nothing asked
        apis.connected(2)
        apis.connected(3)
        await asyncio.sleep(0)
        assert not apis.may_send(2, update) and not apis.may_send(3, update)
        answers[2].set_result(frozenset({ApiKey.FETCH}))  # the previous release
        answers[3].set_exception(ConnectionError("lost"))  # no answer: as if nothing known
        await asyncio.sleep(0)
        assert not apis.may_send(2, update)
        assert apis.may_send(3, update)
        await apis.close()

    run(main())
