"""tests/kafka_peer.py on its own, in process: where its jars come from and when it says why it
cannot have them, the readiness probe's reading of a Metadata answer, and the figures it reads
from Kafka's perf tools (their output as Kafka 4.1 prints it). Nothing is started or fetched."""

from __future__ import annotations

import socket
import struct
import subprocess
import threading

import kafka_peer
import pytest


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("RAFTCORE_CACHE_DIR", str(tmp_path))
    return tmp_path


def test_jars_already_in_the_cache_are_used_without_java_or_maven(cache, monkeypatch):
    libs = cache / "kafka-9.9.9" / "libs"
    libs.mkdir(parents=True)

    def nothing_runs(*args, **kwargs):
        raise AssertionError(f"ran {args}")

    monkeypatch.setattr(kafka_peer.subprocess, "run", nothing_runs)
    monkeypatch.setattr(kafka_peer.shutil, "which", lambda name: None)
    assert kafka_peer.fetch("9.9.9") == libs


def test_without_maven_the_reason_names_the_cache_and_maven_and_nothing_is_left(cache, monkeypatch):
    monkeypatch.setattr(kafka_peer, "java_problem", lambda: None)
    monkeypatch.setattr(kafka_peer.shutil, "which", lambda name: None)
    with pytest.raises(kafka_peer.KafkaUnavailable) as caught:
        kafka_peer.fetch("9.9.9")
    reason = str(caught.value)
    assert str(cache / "kafka-9.9.9" / "libs") in reason and "Maven (mvn)" in reason
    assert kafka_peer.kafka_problem("9.9.9") == reason
    assert not (cache / "kafka-9.9.9" / "libs").exists()


def test_a_failed_fetch_says_maven_s_first_error_and_leaves_no_jars_directory(cache, monkeypatch):
    monkeypatch.setattr(kafka_peer, "java_problem", lambda: None)
    monkeypatch.setattr(kafka_peer.shutil, "which", lambda name: "/usr/bin/" + name)
    output = (
        "\x1b[1;31m[ERROR]\x1b[m Failed to execute goal: could not resolve kafka_2.13:jar:9.9.9\n"
        "[ERROR] \n[ERROR] Re-run Maven using the -X switch to enable full debug logging.\n"
    )

    def maven(command, **kwargs):
        return subprocess.CompletedProcess(command, 1, stdout=output, stderr="")

    monkeypatch.setattr(kafka_peer.subprocess, "run", maven)
    with pytest.raises(kafka_peer.KafkaUnavailable, match=r"exit 1\): \[ERROR\] Failed to ex"):
        kafka_peer.fetch("9.9.9")
    assert not (cache / "kafka-9.9.9" / "libs").exists()


def _string(text: str | None) -> bytes:
    if text is None:
        return struct.pack(">h", -1)
    return struct.pack(">h", len(text)) + text.encode()


def test_the_readiness_probe_reads_the_broker_ids_of_a_metadata_v4_answer():
    brokers = [(3, "broker-3.local", 9094, "rack-a"), (1, "127.0.0.1", 9092, None)]
    body = struct.pack(">ii", 1, 0)  # correlation id, throttle_time_ms
    body += struct.pack(">i", len(brokers))
    for node_id, host, port, rack in brokers:
        body += struct.pack(">i", node_id) + _string(host) + struct.pack(">i", port) + _string(rack)
    body += _string("cluster") + struct.pack(">ii", 1, 0)  # cluster id, controller, no topics
    asked: list[bytes] = []

    with socket.create_server(("127.0.0.1", 0)) as server:

        def answer() -> None:
            conn, _ = server.accept()
            with conn:
                size = struct.unpack(">i", conn.recv(4))[0]
                asked.append(conn.recv(size))
                conn.sendall(struct.pack(">i", len(body)) + body)

        thread = threading.Thread(target=answer)
        thread.start()
        ids = kafka_peer.metadata_brokers("127.0.0.1", server.getsockname()[1])
        thread.join(5)
    assert ids == [3, 1]
    api_key, version = struct.unpack(">hh", asked[0][:4])
    assert (api_key, version) == (3, 4)
    assert asked[0].endswith(struct.pack(">ib", 0, 0))  # no topics, none auto-created


def test_the_producer_perf_figure_is_the_summary_line_not_a_progress_line():
    output = (
        "52689 records sent, 10531.5 records/sec (1.00 MB/sec), 2439.5 ms avg latency, "
        "3849.0 ms max latency.\n"
        "200000 records sent, 22502.3 records/sec (2.15 MB/sec), 4655.72 ms avg latency, "
        "6766.00 ms max latency, 5099 ms 50th, 6543 ms 95th, 6737 ms 99th, 6764 ms 99.9th.\n"
    )
    assert kafka_peer.producer_perf_records_per_s(output) == 22502.3
    with pytest.raises(kafka_peer.KafkaPeerError, match="no summary line"):
        kafka_peer.producer_perf_records_per_s("WARN something\n")


def test_the_consumer_perf_figure_is_the_nmsg_sec_column():
    output = (
        "start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, "
        "rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec\n"
        "2026-11-29 12:24:06:718, 2026-11-29 12:24:09:535, 19.0735, 6.7709, 200000, "
        "70997.5151, 1834, 983, 19.4033, 203458.7996\n"
    )
    assert kafka_peer.consumer_perf_records_per_s(output) == 70997.5151
    with pytest.raises(kafka_peer.KafkaPeerError, match="no result line"):
        kafka_peer.consumer_perf_records_per_s(output.splitlines()[0])


def test_a_cluster_id_is_kafka_s_shape():
    for _ in range(200):
        cid = kafka_peer.new_cluster_id()
        assert len(cid) == 22 and not cid.startswith("-")
        assert set(cid) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
