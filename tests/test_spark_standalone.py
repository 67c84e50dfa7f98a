"""Where one machine is not enough: a Spark standalone master and worker, each its own process
on loopback (pyspark ships them), and an application ``spark-submit``ted to them that reads a
three-node raftcore cluster with the bootstrap mode (and writes to it, once raftcore.spark has
a sink). The executors run in the Spark worker's directory and reach the raftcore nodes over
TCP only: nothing assumes they share the driver's machine or files.

Every process started here (master, worker and its executors, spark-submit, nodes) is ended by
its process group's id when the module's fixtures close, on failure too; every wait has a
deadline. Skipped without Java 17+."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest
from spark_helpers import java_problem

pytest.importorskip("pyarrow", reason="the Spark source yields Arrow batches: pip install pyarrow")
pytest.importorskip(
    "pyspark.sql.datasource", reason="needs pyspark>=4: pip install 'raftcore[spark]'"
)

if (_problem := java_problem()) is not None:
    pytest.skip(_problem, allow_module_level=True)

import pyspark
from cluster_helpers import FAST, consume_all, key, produce, run, wait_caught_up

import raftcore
from raftcore.node.local_cluster import LocalCluster, free_ports

pytestmark = [pytest.mark.slow, pytest.mark.spark, pytest.mark.cluster(3, node_args=FAST)]

RECORDS = 600
PART = 250  # offsets per Spark partition: several tasks
WRITE = 50  # records the application appends, when there is a sink
APP = Path(__file__).with_name("spark_cluster_app.py")
SPARK_BIN = Path(pyspark.__file__).resolve().parent / "bin"
START_TIMEOUT_S = 60.0
APP_TIMEOUT_S = 150.0
SUBMIT_CONF = {
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.driver.memory": "512m",
    "spark.executor.memory": "512m",
    "spark.cores.max": "2",
    "spark.sql.shuffle.partitions": "2",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
}


def _args(**options: object) -> list[str]:
    """``--name value`` command-line options (``work_dir=`` gives ``--work-dir``)."""
    return [a for k, v in options.items() for a in (f"--{k.replace('_', '-')}", str(v))]


class Processes:
    """Processes started in sessions of their own, ended by process group (a JVM's children,
    the worker's executors and their Python workers, go with it)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self._logs: list[IO[bytes]] = []

    def log(self, name: str) -> Path:
        return self.directory / f"{name}.log"

    def start(self, name: str, argv: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
        out = open(self.log(name), "wb")  # noqa: SIM115 (closed in close())
        self._logs.append(out)
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=self.directory,  # outside the checkout
            start_new_session=True,
        )
        self.procs[name] = proc
        return proc

    def tail(self, name: str, lines: int = 30) -> str:
        try:
            text = self.log(name).read_text(errors="replace")
        except FileNotFoundError:
            return ""
        return f"--- {name} ---\n" + "\n".join(text.splitlines()[-lines:])

    def end(self, name: str) -> None:
        proc = self.procs[name]
        for sig, wait_s in ((signal.SIGTERM, 15.0), (signal.SIGKILL, 10.0)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)  # the group's id is the pid: a session of its own
            try:
                proc.wait(wait_s)
                # The leader is gone; what it started may linger in its group until killed.
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                return
            except subprocess.TimeoutExpired:
                continue

    def close(self) -> None:
        for name in reversed(list(self.procs)):
            self.end(name)
        for out in self._logs:
            out.close()


def _spark_env(directory: Path) -> dict[str, str]:
    """Loopback only, an empty configuration directory, and a raftcore on the Python path of
    every process -- as on a cluster whose machines all have raftcore installed. It is the
    raftcore these tests import (installed in CI, a built checkout here), never the source
    tree of a fresh clone, which has no native modules."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPARK_", "PYSPARK_"))}
    conf = directory / "conf"
    conf.mkdir(exist_ok=True)
    root = str(Path(raftcore.__file__).resolve().parent.parent)
    env.update(
        SPARK_CONF_DIR=str(conf),
        SPARK_LOCAL_IP="127.0.0.1",
        SPARK_LOCAL_HOSTNAME="127.0.0.1",
        SPARK_LOG_DIR=str(directory / "logs"),
        SPARK_DAEMON_MEMORY="256m",
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
        PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])),
    )
    return env


def _master_state(ui_port: int) -> dict[str, Any] | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/json/", timeout=2) as resp:
            return json.load(resp)  # type: ignore[no-any-return]
    except (OSError, ValueError):
        return None


@pytest.fixture(scope="module")
def directory(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("spark-standalone")


@pytest.fixture(scope="module")
def processes(directory: Path) -> Iterator[Processes]:
    procs = Processes(directory)
    try:
        yield procs
    finally:
        procs.close()


@pytest.fixture(scope="module")
def spark_master(directory: Path, processes: Processes) -> str:
    """``spark://127.0.0.1:PORT`` of a master with one worker (2 cores, 1 GiB) registered."""
    env = _spark_env(directory)
    port, ui, worker_port, worker_ui = free_ports(4)
    url = f"spark://127.0.0.1:{port}"
    spark_class = str(SPARK_BIN / "spark-class")
    processes.start(
        "master",
        [
            spark_class,
            "org.apache.spark.deploy.master.Master",
            *_args(host="127.0.0.1", port=port, webui_port=ui),
        ],
        env,
    )
    work = directory / "work"
    work.mkdir()
    processes.start(
        "worker",
        [
            spark_class,
            "org.apache.spark.deploy.worker.Worker",
            *_args(host="127.0.0.1", port=worker_port, webui_port=worker_ui),
            *_args(cores=2, memory="1g", work_dir=work),
            url,
        ],
        env,
    )
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        state = _master_state(ui)
        if state is not None and state.get("aliveworkers", 0) >= 1:
            return url
        for name in ("master", "worker"):
            if processes.procs[name].poll() is not None:
                pytest.fail(f"the Spark {name} exited\n{processes.tail(name)}")
        if time.monotonic() > deadline:
            pytest.fail(
                f"no worker registered with {url} within {START_TIMEOUT_S} s\n"
                f"{processes.tail('master')}\n{processes.tail('worker')}"
            )
        time.sleep(0.25)


@pytest.fixture(scope="module")
def written(shared_cluster: LocalCluster) -> tuple[LocalCluster, list[int]]:
    """The module's three nodes holding RECORDS records (every node has them), and their
    offsets."""
    c = shared_cluster
    offsets = run(produce(c.bootstrap, 0, RECORDS))
    run(wait_caught_up(c, c.node_ids))
    return c, offsets


@pytest.fixture(scope="module")
def app_result(
    directory: Path, processes: Processes, spark_master: str, written: Any
) -> dict[str, Any]:
    """What the application submitted to the master saw (its JSON output)."""
    c, _ = written
    out = directory / "result.json"
    processes.start(
        "spark-submit",
        [
            str(SPARK_BIN / "spark-submit"),
            "--master",
            spark_master,
            *(f"--conf={name}={value}" for name, value in SUBMIT_CONF.items()),
            f"--conf=spark.pyspark.python={sys.executable}",
            f"--conf=spark.pyspark.driver.python={sys.executable}",
            str(APP),
            *_args(bootstrap=",".join(c.bootstrap), out=out),
            *_args(partition_records=PART, write=WRITE),
        ],
        _spark_env(directory),
    )
    try:
        status = processes.procs["spark-submit"].wait(APP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        status = None
    if status != 0 or not out.exists():
        executors = sorted((directory / "work").glob("app-*/*/stderr"))
        logs = [processes.tail("spark-submit", 60)] + [
            f"--- {p} ---\n" + "\n".join(p.read_text(errors="replace").splitlines()[-30:])
            for p in executors
        ]
        pytest.fail(
            f"spark-submit {'timed out' if status is None else f'exited with {status}'}\n"
            + "\n".join(logs)
        )
    return json.loads(out.read_text())  # type: ignore[no-any-return]


def test_an_application_on_a_spark_cluster_reads_what_raftcore_committed(
    app_result: dict[str, Any], written: Any, directory: Path
) -> None:
    _, offsets = written
    read = app_result["read"]
    assert read["count"] == RECORDS
    assert read["partitions"] > 1
    expected = [[o, key(n).hex(), (b"v" * 20).hex()] for n, o in enumerate(offsets)]
    assert read["rows"] == expected
    groups = {str(g): sum(1 for o in offsets if o % 4 == g) for g in range(4)}
    assert read["groups"] == {g: n for g, n in groups.items() if n}


def test_the_executors_run_in_the_spark_workers_directory_not_the_drivers(
    app_result: dict[str, Any], spark_master: str, directory: Path
) -> None:
    assert app_result["master"] == spark_master
    work = (directory / "work").resolve()
    executors = [Path(d).resolve() for d in app_result["executor_directories"]]
    assert executors and all(d.is_relative_to(work) for d in executors), executors
    assert not Path(app_result["driver_directory"]).resolve().is_relative_to(work)


def test_an_application_on_a_spark_cluster_appends_to_raftcore(
    app_result: dict[str, Any], written: Any
) -> None:
    write = app_result.get("write", {})
    if "skipped" in write:
        pytest.skip(f"the write step: {write['skipped']}")
    c, _ = written
    keys = run(consume_all(c.bootstrap, RECORDS + WRITE))
    # Each row once; the tasks of the write run in parallel, so in no particular order.
    assert sorted(k.hex() for k in keys[RECORDS:]) == sorted(write["written"])
