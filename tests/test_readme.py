"""Every command in the README runs as written, so the README cannot rot.

Each ``sh`` and ``python`` block of README.md carries a marker comment saying how it is run:

- ``demo-command`` / ``test-command``: the two commands; ``.ci/run`` runs them verbatim;
- ``readme-test: setup``: ``. .venv/bin/activate``, run before every shell block (here against a
  virtualenv stand-in whose ``raftcore`` and ``python`` are the interpreter running the tests);
- ``readme-test: format``: the nodes' data directories formatted, before the nodes start;
- ``readme-test: node``: a node of the three-terminal cluster, started in the background;
- ``readme-test: run``: shell lines run in order in one working directory, each block must exit 0;
  ``run stopped`` runs once the nodes are stopped;
- ``readme-test: kcat``: as ``run``, when kcat is installed (CI installs it);
- ``readme-test: python NAME``: a Python block, run as a script (``kv-example`` by
  tests/test_statemachine_readme.py, ``spark`` with a Spark session here).

The blocks run from the root of a checkout as a fresh clone has it (a copy of this one's
files, no native build in place: the README's reader installed raftcore with ``pip install .``),
so a block that fails from the checkout's root fails here, and the data the blocks write stays
out of this checkout. The ports of the README (9090-9093) are swapped for free ones; nothing
else is changed.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from checkout_helpers import RAFTCORE_ROOT, unbuilt_checkout

from raftcore.node.local_cluster import free_ports

README = Path(__file__).resolve().parent.parent / "README.md"
ROOT = RAFTCORE_ROOT  # the raftcore under test
README_PORTS = ("9090", "9091", "9092", "9093")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

MARKED = re.compile(
    r"<!-- (readme-test|demo-command|test-command):?\s*([^>]*?)\s*-->\s*\n```(\w+)\n(.*?)```",
    re.DOTALL,
)
FENCE = re.compile(r"^```(sh|python)\s*$", re.MULTILINE)


def readme_blocks() -> list[tuple[str, str, str, str]]:
    """(marker, its arguments, language, code) for each marked block, in README order."""
    text = README.read_text(encoding="utf-8")
    return [(m.group(1), m.group(2), m.group(3), m.group(4)) for m in MARKED.finditer(text)]


def blocks_of(kind: str) -> list[str]:
    return [
        code
        for marker, args, _, code in readme_blocks()
        if marker == "readme-test" and args == kind
    ]


def test_every_command_block_of_the_readme_is_run_by_a_test():
    text = README.read_text(encoding="utf-8")
    fences = FENCE.findall(text)
    marked = readme_blocks()
    assert len(marked) == len(fences), (
        f"{len(fences)} sh/python blocks in README.md but {len(marked)} carry a readme-test, "
        "demo-command or test-command marker: mark the new block (see tests/test_readme.py)"
    )
    kinds = {a.split(" ")[0] for m, a, _, _ in marked if m == "readme-test"}
    assert kinds <= {"setup", "format", "node", "run", "kcat", "python"}, kinds
    assert sorted(m for m, _, _, _ in marked if m != "readme-test") == [
        "demo-command",
        "test-command",
    ]
    assert len(blocks_of("node")) == 3
    assert len(blocks_of("format")) == 1


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """The root of an unbuilt checkout with a stand-in ``.venv``: ``activate`` puts its ``bin``
    first on PATH, where ``raftcore`` and ``python`` run the raftcore under test."""
    work = unbuilt_checkout(tmp_path_factory.mktemp("readme") / "checkout")
    bin_dir = work / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    env = f'export PYTHONPATH="{ROOT}${{PYTHONPATH:+:$PYTHONPATH}}"\n'
    (bin_dir / "raftcore").write_text(f'#!/bin/sh\n{env}exec "{sys.executable}" -m raftcore "$@"\n')
    (bin_dir / "python").write_text(f'#!/bin/sh\n{env}exec "{sys.executable}" "$@"\n')
    for tool in ("raftcore", "python"):
        (bin_dir / tool).chmod(0o755)
    (bin_dir / "activate").write_text(f'export PATH="{bin_dir}:$PATH"\n')
    return work


@pytest.fixture(scope="module")
def ports():
    return dict(zip(README_PORTS, map(str, free_ports(len(README_PORTS))), strict=True))


def on_free_ports(code: str, ports: dict[str, str]) -> str:
    return re.sub(r"\b(909[0-3])\b", lambda m: ports[m.group(1)], code)


def shell(code: str, workdir: Path, ports: dict[str, str], timeout_s: float = 60.0) -> str:
    setup = "\n".join(blocks_of("setup"))
    script = f"set -euo pipefail\n{setup}\n{on_free_ports(code, ports)}"
    done = subprocess.run(
        ["bash", "-c", script],
        check=False,
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )
    assert done.returncode == 0, (
        f"README block failed (exit {done.returncode}):\n{code}\n"
        f"stdout:\n{done.stdout[-3000:]}\nstderr:\n{done.stderr[-3000:]}"
    )
    return done.stdout


@pytest.fixture(scope="module")
def readme_nodes(workdir, ports):
    """The README's three nodes, their directories formatted and each started as its block
    says, in the background: started by the README's own commands, which is the point here
    (the suite's LocalCluster is conftest.py's cluster fixture)."""
    setup = "\n".join(blocks_of("setup"))
    for code in blocks_of("format"):
        shell(code, workdir, ports)
    procs = []
    try:
        for i, code in enumerate(blocks_of("node"), start=1):
            log = open(workdir / f"node-{i}.log", "wb")  # noqa: SIM115 (closed below)
            procs.append(
                (
                    subprocess.Popen(
                        ["bash", "-c", f"{setup}\nexec {on_free_ports(code.strip(), ports)}"],
                        cwd=workdir,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
                    ),
                    log,
                )
            )
        wait_for_leader(workdir, ports)
        yield procs
    finally:
        stop(procs)


def wait_for_leader(workdir: Path, ports: dict[str, str], timeout_s: float = 30.0) -> None:
    """As a person would: ask until a leader answers."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            out = shell(
                "raftcore describe-quorum --bootstrap 127.0.0.1:9091 --timeout-ms 2000",
                workdir,
                ports,
                timeout_s=10,
            )
            if "LeaderId" in out:
                return
        except (AssertionError, subprocess.TimeoutExpired):
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"no leader in {timeout_s} s; see {workdir}/node-*.log")
        time.sleep(0.5)


def stop(procs) -> None:
    for proc, _ in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc, log in procs:
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        log.close()
    procs.clear()


def run_blocks() -> list[tuple[str, str]]:
    """The ``run``/``kcat`` blocks of the cluster sections, in order, with their arguments."""
    text = README.read_text(encoding="utf-8")
    start, end = text.index("## Your first cluster"), text.index("## Embedding a node")
    out = []
    for m in MARKED.finditer(text, start, end):
        if m.group(1) == "readme-test" and m.group(2).split(" ")[0] in ("run", "kcat"):
            out.append((m.group(2), m.group(4)))
    return out


def test_the_readme_cluster_answers_the_fourth_terminal(readme_nodes, workdir, ports):
    (args, code), *_ = run_blocks()
    assert args == "run"
    out = shell(code, workdir, ports)
    assert "LeaderId" in out
    assert out.rstrip().splitlines()[-3:] == ["998", "999", "1000"]


def test_the_readme_kcat_round_trip(readme_nodes, workdir, ports):
    kcat = [code for args, code in run_blocks() if args == "kcat"]
    assert len(kcat) == 1
    if shutil.which("kcat") is None:
        pytest.skip("kcat is not installed (Debian: apt install kcat; .ci/run installs it)")
    out = shell(kcat[0], workdir, ports)
    assert out.split() == ["hello", "world"]


def test_the_readme_troubleshooting_commands_on_a_stopped_node(readme_nodes, workdir, ports):
    stop(readme_nodes)
    blocks = [code for args, code in run_blocks() if args == "run"][1:]
    assert blocks, "the README lost its troubleshooting commands"
    for code in blocks:
        out = shell(code, workdir, ports)
        if "verify-log" in code:
            assert out.startswith("OK: ")


def test_the_readme_storage_and_simulation_commands(workdir, ports):
    text = README.read_text(encoding="utf-8")
    start = text.index("## The storage layer from the command line")
    codes = [
        m.group(4)
        for m in MARKED.finditer(text, start)
        if m.group(1) == "readme-test" and m.group(2) == "run"
    ]
    assert len(codes) == 2
    assert "verify-log sample-log" in codes[0]
    out = shell(codes[0], workdir, ports, timeout_s=120)
    assert "OK: " in out
    out = shell(codes[1], workdir, ports, timeout_s=120)
    assert "100 seeds ok" in out


def python_block(name: str) -> str:
    (code,) = [c for m, a, lang, c in readme_blocks() if a == f"python {name}" and lang == "python"]
    return code


def run_python(code: str, workdir: Path, ports: dict[str, str]) -> str:
    script = workdir / "example.py"
    script.write_text(on_free_ports(code, ports))
    done = subprocess.run(
        [sys.executable, str(script)],
        check=False,
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr[-3000:]}"
    return done.stdout


def test_the_readme_embedded_node_counts_its_words(workdir, ports):
    code = python_block("embed")
    assert len(code.strip().splitlines()) <= 45
    out = run_python(code, workdir, ports)
    assert out.strip() == "{b'to': 2, b'be': 2, b'or': 1, b'not': 1}"


def test_the_readme_storage_example_runs(workdir, ports):
    out = run_python(python_block("storage"), workdir, ports)
    assert "b'key' b'value'" in out


@pytest.mark.spark
@pytest.mark.slow
def test_the_readme_spark_block_reads_and_appends(tmp_path_factory, workdir, ports):
    """The Spark block as written (it makes its session: ``getOrCreate`` gets the local one
    started here), with a cluster at the README's 9091."""
    from spark_helpers import java_problem, spark_session

    if (problem := java_problem()) is not None:
        pytest.skip(problem)
    pytest.importorskip("pyspark")
    from raftcore.node.local_cluster import LocalCluster

    spark_ports = {**ports, "9091": str(free_ports(1)[0])}
    code = on_free_ports(python_block("spark"), spark_ports)
    sessions = spark_session(workdir)  # its Python workers run from the checkout's root too
    spark = next(sessions)
    try:
        with LocalCluster(
            tmp_path_factory.mktemp("readme-spark-cluster"), 1, ports=[int(spark_ports["9091"])]
        ) as cluster:
            cluster.start()
            wait_for_leader(workdir, spark_ports)
            exec(compile(code, str(README), "exec"), {"__name__": "readme"})
            df = spark.read.format("raftcore").option("bootstrap", cluster.bootstrap[0]).load()
            assert sorted(r.value for r in df.select("value").collect()) == [b"v1", b"v2"]
    finally:
        next(sessions, None)


def test_the_readme_tls_demo_runs_over_mutual_tls(workdir, ports):
    text = README.read_text(encoding="utf-8")
    start, end = text.index("## Security"), text.index("## Using the storage layer")
    (code,) = [
        m.group(4)
        for m in MARKED.finditer(text, start, end)
        if m.group(1) == "readme-test" and m.group(2) == "run"
    ]
    out = shell(code, workdir, ports, timeout_s=150)
    assert "mutual TLS" in out
    assert "every acknowledged record exactly once" in out


@pytest.mark.spark
@pytest.mark.slow
def test_the_readme_spark_block_run_by_a_venv_python_not_on_path_finds_the_source(
    tmp_path_factory, workdir, ports
):
    """``.venv/bin/python app.py`` without an activated virtualenv: Spark's Python workers ran
    the python3 on PATH, which has no raftcore, and the read failed (DATA_SOURCE_NOT_FOUND, or
    an import error where PYTHONPATH reaches a checkout). Here the first python3 on PATH is
    one that cannot import raftcore, and PYSPARK_PYTHON is unset."""
    from spark_helpers import java_problem

    if (problem := java_problem()) is not None:
        pytest.skip(problem)
    pytest.importorskip("pyspark")
    from raftcore.node.local_cluster import LocalCluster

    shims = tmp_path_factory.mktemp("path-python")
    (shims / "python3").write_text(f'#!/bin/sh\nexec "{sys.executable}" -S "$@"\n')
    (shims / "python3").chmod(0o755)  # -S: no site-packages, so no raftcore, no pyarrow
    spark_ports = {**ports, "9091": str(free_ports(1)[0])}
    code = on_free_ports(python_block("spark"), spark_ports)
    script = workdir / "app.py"
    script.write_text(code)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK_")}
    env["PATH"] = f"{shims}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = str(ROOT)
    with LocalCluster(
        tmp_path_factory.mktemp("readme-spark-path"), 1, ports=[int(spark_ports["9091"])]
    ) as cluster:
        cluster.start()
        wait_for_leader(workdir, spark_ports)
        done = subprocess.run(
            [sys.executable, str(script)],
            check=False,
            cwd=workdir,
            capture_output=True,
            text=True,
            timeout=240,
            env=env,
        )
    assert done.returncode == 0, f"stderr:\n{done.stderr[-3000:]}"


def test_the_readme_links_every_docs_page_and_promises_nothing_as_next():
    """The README once said operability and security were "next" an issue after both were
    done. It says what raftcore does, links every page of docs/, and promises nothing."""
    text = README.read_text()
    for page in sorted((README.parent / "docs").glob("*.md")):
        assert f"docs/{page.name}" in text, page.name
    summary = text[text.index("What it does:") : text.index("## Two commands")]
    assert "next" not in summary.lower()
