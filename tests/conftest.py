"""Shared test setup.

raftcore has no pure-Python fallback, so a missing, half-built or stale native build must stop
the run with an error -- never turn into skipped tests or a quiet slow path (aiokafka's
conftest does the same for its C extension).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.machinery
import re
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

NATIVE_MODULES = (
    "crc32c",
    "records",
    "segment",
    "epoch_cache",
    "validation",
    "kv_records",
    "columnar",
)
SOURCE_ROOT = Path(__file__).resolve().parent.parent


def _native_problem() -> str | None:
    """Why the native build is unusable, or None when every compiled module loaded."""
    suffixes = tuple(importlib.machinery.EXTENSION_SUFFIXES)
    for name in NATIVE_MODULES:
        qualified = f"raftcore._native.{name}"
        try:
            module = importlib.import_module(qualified)
        except ImportError as exc:
            return f"{qualified} did not import: {exc}"
        path = Path(getattr(module, "__file__", "") or "")
        if not path.name.endswith(suffixes):
            return f"{qualified} was loaded from {path}, which is not a compiled extension"
        # In a source checkout (modules built in place), an extension older than the sources
        # it is built from is stale: the tests would check other code than the checkout's.
        if path.resolve().is_relative_to(SOURCE_ROOT):
            newer = [s.name for s in _sources_of(name) if s.stat().st_mtime > path.stat().st_mtime]
            if newer:
                return f"{qualified} ({path}) is older than {', '.join(newer)} (stale build)"
        # The checkout's raftcore/ without a build in place runs with an installed build
        # (raftcore._native): the tests would check that build, not the checkout's sources.
        elif _checkout_package_under_test():
            return f"{qualified} is not built in this checkout but loaded from {path}"
    return None


def _checkout_package_under_test() -> bool:
    raftcore = importlib.import_module("raftcore")
    return Path(raftcore.__file__ or "").resolve().is_relative_to(SOURCE_ROOT)


def _sources_of(name: str) -> list[Path]:
    """The .pyx of a native module and the shared files it cimports or includes, followed
    through the .pxd and .pxi files themselves (batch_header.pxd cimports wire.pxd)."""
    native = SOURCE_ROOT / "_native"
    pyx = native / f"{name}.pyx"
    if not pyx.exists():
        return []
    found: dict[str, Path] = {}
    todo = [pyx]
    while todo:
        source = todo.pop()
        text = source.read_text(encoding="utf-8")
        stems = set(re.findall(r"^\s*from\s+(\w+)\s+cimport", text, re.MULTILINE))
        names = {f"{stem}.pxd" for stem in stems} | {f"{stem}.c" for stem in stems}
        names |= set(re.findall(r'extern from "([\w.]+)"', text))
        names |= set(re.findall(r'^include\s+"([\w.]+)"', text, re.MULTILINE))
        for file_name in sorted(names - found.keys()):
            path = native / file_name
            if path.exists():
                found[file_name] = path
                if path.suffix in (".pxd", ".pxi"):
                    todo.append(path)
    return [pyx, *(found[f] for f in sorted(found))]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "cluster(size=3, node_args=FAST, ready=None, shared=False, **LocalCluster options): "
        "what the cluster fixture starts (tests/conftest.py)",
    )
    problem = _native_problem()
    if problem is not None:
        raise pytest.UsageError(
            f"raftcore's native build is unusable: {problem}. Build it with "
            "`python setup.py build_ext --inplace` (or `pip install .`)."
        )


def pytest_report_header(config: pytest.Config) -> str:
    records = importlib.import_module("raftcore._native.records")
    crc = importlib.import_module("raftcore._native.crc32c")
    return f"raftcore native: {Path(records.__file__).parent} (crc32c: {crc.implementation()})"


# ---- the cluster of node processes -------------------------------------------------------------


def _cluster_options(node: pytest.Item | pytest.Collector) -> dict[str, Any]:
    mark = node.get_closest_marker("cluster")
    if mark is None:
        raise pytest.UsageError(
            f"{node.nodeid} asks for the cluster fixture without a pytest.mark.cluster(...) "
            "saying what to start"
        )
    if mark.args:
        return {"size": mark.args[0], **mark.kwargs}
    return dict(mark.kwargs)


@pytest.fixture
def cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """Node processes (LocalCluster), started as the test's or its module's
    ``pytest.mark.cluster(...)`` says (cluster_helpers.running_cluster's arguments): each
    node listening and the mark's ``ready`` done before the test, every process gone after
    it. With ``shared=True`` the module's tests share one cluster (``shared_cluster``)."""
    options = _cluster_options(request.node)
    if options.pop("shared", False):
        yield request.getfixturevalue("shared_cluster")
        return
    from cluster_helpers import running_cluster

    with running_cluster(tmp_path / "cluster", **options) as c:
        yield c


@pytest.fixture(scope="module")
def shared_cluster(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Any]:
    """One cluster for a module's tests, as the module's ``pytest.mark.cluster`` says."""
    from cluster_helpers import running_cluster

    options = _cluster_options(request.node)
    options.pop("shared", None)
    with running_cluster(tmp_path_factory.mktemp("cluster"), **options) as c:
        yield c


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A listening socket nobody accepts from: connections open, requests go unanswered."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        yield silent.getsockname()[1]


@pytest.fixture
def closing_port() -> Iterator[int]:
    """A listener that reads a little of each connection and closes it unanswered."""
    with socket.socket() as closer:
        closer.bind(("127.0.0.1", 0))
        closer.listen(8)
        closer.settimeout(0.1)
        stop = threading.Event()

        def close_each() -> None:
            while not stop.is_set():
                try:
                    conn, _ = closer.accept()
                except OSError:
                    continue
                with conn:
                    conn.settimeout(1.0)
                    with contextlib.suppress(OSError):
                        conn.recv(64)

        thread = threading.Thread(target=close_each, daemon=True)
        thread.start()
        try:
            yield closer.getsockname()[1]
        finally:
            stop.set()
            thread.join(5)


_FORMATTED: set[Path] = set()  # the data directories the fixture below formatted


@pytest.fixture(autouse=True)
def format_new_node_directories(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[None]:
    """An in-process node (``RaftNode``) of the suite starts on a data directory its test
    names but does not make: the first time a node opens one that is new (nothing there but
    a state machine the test made for it), it is formatted as ``raftcore format`` would (the
    node's ``voters`` as the first voter set, or none for a node that is not one of them),
    as ``LocalCluster`` formats the directories it creates. Never a directory holding a log
    or a quorum-state, nor one formatted before (a test that wiped it formats it itself). A
    test marked ``unformatted`` sees the node refuse."""
    if request.node.get_closest_marker("unformatted") is not None:
        yield
        return
    from raftcore.node import node as node_module
    from raftcore.node.data_dir import LOG_DIR, META_PROPERTIES, format_data_dir

    FORMAT_REFUSES = (META_PROPERTIES, "quorum-state", LOG_DIR)

    check = node_module.check_meta_properties

    def formatting_check(cfg):  # type: ignore[no-untyped-def]
        directory = Path(cfg.data_dir).absolute()
        fresh = not any((directory / name).exists() for name in FORMAT_REFUSES)
        if directory not in _FORMATTED and fresh:
            format_data_dir(
                directory,
                cluster_id=cfg.cluster_id,
                node_id=cfg.node_id,
                initial_voters=list(cfg.voters) if cfg.node_id in cfg.voters else None,
                topic=cfg.topic,
                partitions=cfg.partitions,
            )
            _FORMATTED.add(directory)
        return check(cfg)

    monkeypatch.setattr(node_module, "check_meta_properties", formatting_check)
    yield
