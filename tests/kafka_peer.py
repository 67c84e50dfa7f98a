"""Apache Kafka itself as a peer: its broker and its command-line tools, run from the jars of
its Maven Central release, for the benchmarks (bench/test_bench_kafka_peer.py) and the
cross-checks (tests/test_kafka_tools_crosscheck.py).

- :func:`fetch`: the jars of ``kafka_2.13`` (the broker) and ``kafka-tools`` at
  :data:`KAFKA_VERSION`, copied by Maven (a generated pom and ``dependency:copy-dependencies``)
  into ``<cache>/kafka-<version>/libs``; ``<cache>`` is ``$RAFTCORE_CACHE_DIR``, else
  ``$XDG_CACHE_HOME/raftcore``, else ``~/.cache/raftcore``. Once there, nothing is fetched
  again and Maven is not needed. :func:`kafka_problem` says why Kafka cannot run here (no Java
  17+, no Maven, the fetch failed), or None.
- :class:`KafkaCluster`: N brokers in KRaft mode on loopback, each node both broker and
  controller (``process.roles=broker,controller``) with a static quorum
  (``controller.quorum.voters``), formatted with ``kafka.tools.StorageTool``; ready once every
  broker's port answers a Metadata request naming all N brokers; every JVM ended by its pid.
- :func:`run_tool`: one of Kafka's command-line tools (:data:`TOOLS`: ``kafka-topics``,
  ``kafka-consumer-groups``, ``kafka-producer-perf-test``, ``kafka-consumer-perf-test``,
  ``kafka-console-consumer``) as its Java main class, against any bootstrap address.

Standard library only, so that ``python3 tests/kafka_peer.py fetch`` can fill the cache before
any virtual environment exists (.ci/run does).
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
import uuid
from pathlib import Path

__all__ = [
    "KAFKA_VERSION",
    "TOOLS",
    "KafkaCluster",
    "KafkaUnavailable",
    "fetch",
    "kafka_problem",
    "metadata_brokers",
    "run_tool",
]

KAFKA_VERSION = os.environ.get("RAFTCORE_KAFKA_VERSION", "4.1.1")

# The scripts of Kafka's bin/ and the main classes they run (bin/kafka-run-class.sh).
TOOLS = {
    "kafka-topics": "org.apache.kafka.tools.TopicCommand",
    "kafka-consumer-groups": "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
    "kafka-producer-perf-test": "org.apache.kafka.tools.ProducerPerformance",
    "kafka-consumer-perf-test": "org.apache.kafka.tools.ConsumerPerformance",
    "kafka-console-consumer": "org.apache.kafka.tools.consumer.ConsoleConsumer",
}
BROKER_MAIN = "kafka.Kafka"
STORAGE_TOOL = "kafka.tools.StorageTool"

# One heap per JVM, kept small: the machine is shared, and neither the brokers of a loopback
# benchmark nor a tool needs more.
BROKER_HEAP = "512m"
TOOL_HEAP = "256m"

_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>raftcore.tests</groupId>
  <artifactId>kafka-peer</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId>
      <version>{version}</version>
    </dependency>
    <dependency>
      <groupId>org.apache.kafka</groupId><artifactId>kafka-tools</artifactId>
      <version>{version}</version>
    </dependency>
    <!-- Kafka logs through slf4j 1.7; without a binding a broker that fails says nothing -->
    <dependency>
      <groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j-impl</artifactId>
      <version>2.24.3</version>
    </dependency>
  </dependencies>
</project>
"""

# Brokers log INFO to their stdout (a file per node); tools log warnings to stderr, as Kafka's
# config/tools-log4j2.yaml does.
_LOG4J2 = """status = error
appender.out.type = Console
appender.out.name = OUT
appender.out.target = {target}
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = {level}
rootLogger.appenderRef.out.ref = OUT
"""


class KafkaUnavailable(Exception):
    """Kafka cannot run here; the message says why (a test or benchmark skips with it)."""


class KafkaPeerError(Exception):
    """A Kafka process failed or did not get ready; the message names it and its log's tail."""


# ---- the jars -----------------------------------------------------------------------------------


def cache_root() -> Path:
    explicit = os.environ.get("RAFTCORE_CACHE_DIR")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "raftcore"


def kafka_home(version: str = KAFKA_VERSION) -> Path:
    return cache_root() / f"kafka-{version}"


def java_binary() -> str | None:
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    return java if java and os.path.exists(java) else None


def java_problem() -> str | None:
    """Why Kafka's JVMs cannot start here (no Java 17+), or None."""
    java = java_binary()
    if java is None:
        return "Kafka needs Java 17+: no java on PATH and no JAVA_HOME"
    try:
        out = subprocess.run(
            [java, "-version"], check=False, capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"Kafka needs Java 17+: {java} -version failed ({exc})"
    m = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    major = int(m.group(2) if m and m.group(1) == "1" else m.group(1)) if m else 0
    return None if major >= 17 else f"Kafka needs Java 17+: {java} is version {major or '?'}"


def fetch(version: str = KAFKA_VERSION, timeout_s: float = 600.0) -> Path:
    """The directory holding Kafka ``version``'s jars, fetched with Maven the first time.
    Raises KafkaUnavailable saying why they cannot be had. Safe to call from several
    processes at once (pytest-xdist workers): one fetches while the others wait on a lock."""
    home = kafka_home(version)
    libs = home / "libs"
    if libs.is_dir():  # complete: a fetch renames its directory into place only at the end
        return libs
    problem = java_problem()
    if problem is not None:
        raise KafkaUnavailable(problem)
    mvn = shutil.which("mvn")
    if mvn is None:
        raise KafkaUnavailable(
            f"Kafka {version}'s jars are not in {libs} and Maven (mvn) is not on the PATH "
            "to fetch them (Debian: apt install maven)"
        )
    home.mkdir(parents=True, exist_ok=True)
    with open(home / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if libs.is_dir():  # another process fetched them while this one waited
            return libs
        partial = home / "libs.partial"
        shutil.rmtree(partial, ignore_errors=True)
        (home / "pom.xml").write_text(_POM.format(version=version))
        command = [mvn, "-q", "-B", "-f", str(home / "pom.xml"), "dependency:copy-dependencies"]
        command += [f"-DoutputDirectory={partial}", "-DincludeScope=runtime"]
        try:
            out = subprocess.run(
                command, capture_output=True, text=True, timeout=timeout_s, check=False
            )
        except subprocess.TimeoutExpired:
            raise KafkaUnavailable(
                f"Maven did not fetch Kafka {version}'s jars into {partial} in {timeout_s:.0f} s"
            ) from None
        if out.returncode != 0:
            raise KafkaUnavailable(
                f"Maven could not fetch Kafka {version}'s jars (exit {out.returncode}): "
                + _maven_error(out.stdout + out.stderr)
            )
        partial.rename(libs)
    return libs


def _maven_error(output: str) -> str:
    """The first line of Maven's output that says what failed (its closing advice does not)."""
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", line).strip() for line in output.splitlines()]
    errors = [line for line in lines if line.startswith("[ERROR]") and len(line) > 8]
    return (errors or [line for line in lines if line] or ["(no output)"])[0][:500]


def kafka_problem(version: str = KAFKA_VERSION) -> str | None:
    """Why Kafka ``version`` cannot run here, or None (its jars then are in the cache)."""
    try:
        fetch(version)
    except KafkaUnavailable as exc:
        return str(exc)
    return java_problem()  # the jars may be cached on a machine without Java


def _log_config(home: Path, name: str, target: str, level: str) -> Path:
    path = home / f"{name}-log4j2.properties"
    if not path.exists():
        path.write_text(_LOG4J2.format(target=target, level=level))
    return path


def java_command(
    main: str, args: list[str], *, heap: str, log_config: Path, version: str = KAFKA_VERSION
) -> list[str]:
    """``java`` running ``main`` from Kafka ``version``'s jars (fetched already)."""
    java = java_binary()
    if java is None:
        raise KafkaUnavailable("Kafka needs Java 17+: no java on PATH and no JAVA_HOME")
    libs = kafka_home(version) / "libs"
    return [
        java,
        f"-Xmx{heap}",
        "-XX:+UseG1GC",
        "-Djava.awt.headless=true",
        f"-Dlog4j2.configurationFile={log_config}",
        "-cp",
        str(libs / "*"),
        main,
        *args,
    ]


# ---- the tools ----------------------------------------------------------------------------------


def run_tool(
    tool: str, args: list[str], *, timeout_s: float = 120.0, version: str = KAFKA_VERSION
) -> subprocess.CompletedProcess[str]:
    """Run Kafka's ``tool`` (a key of :data:`TOOLS`) with ``args``, as its script in bin/ would;
    its exit code, stdout and stderr are in the answer. A tool still running after
    ``timeout_s`` is killed and raises subprocess.TimeoutExpired."""
    home = kafka_home(version)
    fetch(version)
    command = java_command(
        TOOLS[tool],
        args,
        heap=TOOL_HEAP,
        log_config=_log_config(home, "tools", "SYSTEM_ERR", "WARN"),
        version=version,
    )
    return subprocess.run(
        command,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


_PERF_LINE = re.compile(r"(\d+) records sent, ([\d.]+) records/sec")


def producer_perf_records_per_s(output: str) -> float:
    """The records/s of kafka-producer-perf-test's summary line (its last one)."""
    found = _PERF_LINE.findall(output)
    if not found:
        raise KafkaPeerError(f"no summary line in kafka-producer-perf-test's output: {output}")
    return float(found[-1][1])


def consumer_perf_records_per_s(output: str) -> float:
    """The records/s (``nMsg.sec``) of kafka-consumer-perf-test's CSV line."""
    lines = [line for line in output.strip().splitlines() if line.strip()]
    header = next((i for i, line in enumerate(lines) if "nMsg.sec" in line), None)
    if header is None or header + 1 >= len(lines):
        raise KafkaPeerError(f"no result line in kafka-consumer-perf-test's output: {output}")
    names = [name.strip() for name in lines[header].split(",")]
    values = [value.strip() for value in lines[header + 1].split(",")]
    return float(values[names.index("nMsg.sec")])


# ---- a Metadata request, to see a broker ready ------------------------------------------------

METADATA_KEY, METADATA_VERSION = 3, 4  # Kafka 4 answers Metadata v4..; v4 is not flexible


def metadata_brokers(host: str, port: int, timeout_s: float = 2.0) -> list[int]:
    """The node ids of the brokers a Kafka node's Metadata answer (v4, no topics) lists."""
    client = b"raftcore-kafka-peer"
    body = struct.pack(">hhih", METADATA_KEY, METADATA_VERSION, 1, len(client)) + client
    body += struct.pack(">ib", 0, 0)  # topics: none; allow_auto_topic_creation: false
    with socket.create_connection((host, port), timeout=timeout_s) as sock:
        sock.sendall(struct.pack(">i", len(body)) + body)
        size = struct.unpack(">i", _read(sock, 4))[0]
        data = _read(sock, size)
    # correlation id, throttle_time_ms, then the brokers: node_id, host, port, rack (nullable)
    pos = 8
    (count,) = struct.unpack_from(">i", data, pos)
    pos += 4
    ids = []
    for _ in range(count):
        node_id, host_len = struct.unpack_from(">ih", data, pos)
        pos += 6 + host_len + 4
        (rack_len,) = struct.unpack_from(">h", data, pos)
        pos += 2 + max(rack_len, 0)
        ids.append(node_id)
    return ids


def _read(sock: socket.socket, size: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < size:
        chunk = sock.recv(size - len(chunks))
        if not chunk:
            raise ConnectionError(f"the connection closed after {len(chunks)} of {size} bytes")
        chunks += chunk
    return bytes(chunks)


# ---- a cluster ----------------------------------------------------------------------------------


def new_cluster_id() -> str:
    """A Kafka cluster id: 16 random bytes in URL-safe base64, unpadded, not starting with '-'
    (Kafka's Uuid.randomUuid refuses those too: a tool would read them as an option)."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not text.startswith("-"):
            return text


def _free_ports(count: int, host: str) -> list[int]:
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in socks:
            sock.bind((host, 0))
        return [sock.getsockname()[1] for sock in socks]


class KafkaCluster:
    """``size`` Apache Kafka nodes (broker and controller each) in KRaft mode on ``host``; use
    as a context manager. ``flush_every_message``: fsync every record before it counts
    (``log.flush.interval.messages=1``, raftcore's ``--flush always``); otherwise Kafka's
    default, which leaves flushing to the operating system. ``properties`` are added to every
    node's ``server.properties`` (and win over the ones set here)."""

    def __init__(
        self,
        directory: str | os.PathLike[str],
        size: int = 3,
        *,
        flush_every_message: bool = False,
        host: str = "127.0.0.1",
        properties: dict[str, str] | None = None,
        heap: str = BROKER_HEAP,
        version: str = KAFKA_VERSION,
    ) -> None:
        self.directory = Path(directory).absolute()
        self.size = size
        self.host = host
        self.version = version
        self.heap = heap
        self.flush_every_message = flush_every_message
        self.extra = dict(properties or {})
        self.node_ids = list(range(1, size + 1))
        ports = _free_ports(2 * size, host)
        self.broker_ports = dict(zip(self.node_ids, ports[:size], strict=True))
        self.controller_ports = dict(zip(self.node_ids, ports[size:], strict=True))
        self.cluster_id = new_cluster_id()
        self.procs: dict[int, subprocess.Popen[bytes]] = {}

    @property
    def bootstrap(self) -> list[str]:
        return [f"{self.host}:{self.broker_ports[n]}" for n in self.node_ids]

    def log_file(self, node_id: int) -> Path:
        return self.directory / f"kafka-{node_id}.log"

    def properties(self, node_id: int) -> dict[str, str]:
        voters = ",".join(f"{n}@{self.host}:{self.controller_ports[n]}" for n in self.node_ids)
        replicas = str(min(3, self.size))
        props = {
            "process.roles": "broker,controller",
            "node.id": str(node_id),
            "controller.quorum.voters": voters,
            "listeners": f"PLAINTEXT://{self.host}:{self.broker_ports[node_id]},"
            f"CONTROLLER://{self.host}:{self.controller_ports[node_id]}",
            "advertised.listeners": f"PLAINTEXT://{self.host}:{self.broker_ports[node_id]}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(self.directory / f"data-{node_id}"),
            "num.partitions": "1",
            "default.replication.factor": replicas,
            "min.insync.replicas": str(min(2, self.size)),
            "offsets.topic.replication.factor": replicas,
            "offsets.topic.num.partitions": "1",
            "transaction.state.log.replication.factor": replicas,
            "transaction.state.log.min.isr": str(min(2, self.size)),
            "share.coordinator.state.topic.replication.factor": replicas,
            "share.coordinator.state.topic.min.isr": str(min(2, self.size)),
            "group.initial.rebalance.delay.ms": "0",
            "auto.create.topics.enable": "false",
            # a raftcore node takes batches of up to 8 MiB; so does this peer
            "message.max.bytes": str(8 * 1024 * 1024),
            "replica.fetch.max.bytes": str(8 * 1024 * 1024),
            "num.network.threads": "2",
            "num.io.threads": "4",
        }
        if self.flush_every_message:
            props["log.flush.interval.messages"] = "1"
        props.update(self.extra)
        return props

    def _write_properties(self, node_id: int) -> Path:
        path = self.directory / f"server-{node_id}.properties"
        path.write_text("".join(f"{k}={v}\n" for k, v in self.properties(node_id).items()))
        return path

    def _command(self, main: str, args: list[str]) -> list[str]:
        home = kafka_home(self.version)
        log_config = _log_config(home, "broker", "SYSTEM_OUT", "INFO")
        return java_command(main, args, heap=self.heap, log_config=log_config)

    def format(self, timeout_s: float = 120.0) -> None:
        """Format every node's log directory (bin/kafka-storage.sh format), all at once."""
        fetch(self.version)
        self.directory.mkdir(parents=True, exist_ok=True)
        running = []
        for node_id in self.node_ids:
            props = self._write_properties(node_id)
            args = ["format", "-t", self.cluster_id, "-c", str(props), "--ignore-formatted"]
            running.append(
                subprocess.Popen(
                    self._command(STORAGE_TOOL, args),
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                )
            )
        problems = []
        for node_id, proc in zip(self.node_ids, running, strict=True):
            try:
                out, _ = proc.communicate(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                out, _ = proc.communicate()
                problems.append(f"node {node_id}: the storage tool ran over {timeout_s:.0f} s")
                continue
            if proc.returncode != 0:
                problems.append(f"node {node_id}: exit {proc.returncode}: {out.strip()[-1000:]}")
        if problems:
            raise KafkaPeerError("kafka-storage format failed: " + "; ".join(problems))

    def start(self, timeout_s: float = 120.0) -> None:
        """Format, start every node, and wait until every broker's Metadata answer names all
        of them (KafkaPeerError with the log's tail if a node exits or the time runs out)."""
        self.format()
        for node_id in self.node_ids:
            props = self.directory / f"server-{node_id}.properties"
            with open(self.log_file(node_id), "wb") as log:
                self.procs[node_id] = subprocess.Popen(
                    self._command(BROKER_MAIN, [str(props)]),
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    cwd=self.directory,
                )
        self.wait_ready(timeout_s)

    def log_tail(self, node_id: int, lines: int = 20) -> str:
        try:
            text = self.log_file(node_id).read_text(errors="replace")
        except OSError as exc:
            return f"(no log: {exc})"
        return "\n".join(text.splitlines()[-lines:])

    def wait_ready(self, timeout_s: float = 120.0) -> None:
        deadline = time.monotonic() + timeout_s
        waiting = set(self.node_ids)
        last: dict[int, str] = {}
        while waiting:
            for node_id in sorted(waiting):
                proc = self.procs[node_id]
                if proc.poll() is not None:
                    raise KafkaPeerError(
                        f"Kafka node {node_id} exited ({proc.returncode}) before it was ready; "
                        f"{self.log_file(node_id)} ends:\n{self.log_tail(node_id)}"
                    )
                try:
                    ids = metadata_brokers(self.host, self.broker_ports[node_id])
                except (OSError, struct.error) as exc:
                    last[node_id] = f"no Metadata answer ({exc})"
                    continue
                if sorted(ids) == self.node_ids:
                    waiting.discard(node_id)
                else:
                    last[node_id] = f"its Metadata answer lists brokers {sorted(ids)}"
            if not waiting:
                return
            if time.monotonic() > deadline:
                late = "; ".join(f"node {n}: {last.get(n)}" for n in sorted(waiting))
                raise KafkaPeerError(
                    f"Kafka's brokers were not all ready in {timeout_s:.0f} s ({late})"
                )
            time.sleep(0.2)

    def close(self) -> None:
        """End every node by its pid (SIGKILL: the data is thrown away) and wait for it."""
        for proc in self.procs.values():
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGKILL)
        for proc in self.procs.values():
            proc.wait(30)
        self.procs.clear()

    def __enter__(self) -> KafkaCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def main(argv: list[str]) -> int:
    """``fetch [VERSION]``: fill the cache, print where the jars are, or why they are not."""
    if not argv or argv[0] != "fetch":
        print("usage: python3 tests/kafka_peer.py fetch [VERSION]", file=sys.stderr)
        return 2
    version = argv[1] if len(argv) > 1 else KAFKA_VERSION
    started = time.monotonic()
    try:
        libs = fetch(version)
    except KafkaUnavailable as exc:
        print(f"Kafka {version} is unavailable: {exc}", file=sys.stderr)
        return 1
    took = time.monotonic() - started
    print(f"Kafka {version}: {len(list(libs.glob('*.jar')))} jars in {libs} ({took:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
