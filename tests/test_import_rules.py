"""Which layers of raftcore may import which (ARCHITECTURE.md, "The layers, bottom to top"),
and no module cycle through the imports that run when a module is loaded.

Every module under ``raftcore/`` is parsed with ``ast``; nothing is imported to check it. An
import statement counts when it can run:

- at module level, in any branch (``try``/``except``, ``if``): it runs when the module loads;
- inside a function or method: it runs when that is called, and loads the module all the same,
  so the layer rules count it; the cycle rule does not (both modules are loaded by then, so a
  cycle through it cannot leave a module half-initialised), and lists those cycles apart;
- never under ``if TYPE_CHECKING:`` (annotations only; it never runs).

``from P import name`` imports the module ``P.name`` when raftcore has one (``from raftcore.raft
import fetch``), else ``P``. For the layer rules, importing ``a.b.c`` also loads the packages
``a`` and ``a.b`` (their ``__init__`` runs): those are followed too. The cycle rule follows only
the modules the statements name: a package whose ``__init__`` re-exports its own modules is
not in a cycle with each module that imports a sibling through the package.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections import deque
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

import raftcore

ROOT = Path(raftcore.__file__).parent

# The shared values and errors, below every layer (ARCHITECTURE.md: "shared").
SHARED = (
    "raftcore.endpoints",
    "raftcore.offsets",
    "raftcore.errors",
    "raftcore.error_codes",
    "raftcore.connect_errors",
)
# Below the core and the log: batches, checkpoint files, the epoch cache, the native modules.
STORAGE_BASE = (
    "raftcore._native",
    "raftcore.records",
    "raftcore.columnar",
    "raftcore.checkpoint",
    "raftcore.epoch_cache",
    "raftcore.batch_validation",
)

# Cycles through imports inside functions only (no cycle through module-level imports is
# allowed). A new one is a failure; these are known, each with its reason.
KNOWN_DEFERRED_CYCLES = {
    # The Spark data source hands a streaming query its reader, and the stream reader reads
    # each micro-batch with the batch reader; both import the other when Spark calls them.
    frozenset({"raftcore.spark.source", "raftcore.spark.stream"}),
    # Metrics families and the state gauges that read the node's metrics state.
    frozenset({"raftcore.node.metrics", "raftcore.node.metrics_state"}),
}


@dataclass(frozen=True)
class Import:
    target: str  # the module imported (a module of raftcore or any other)
    line: int
    in_function: bool


def _is_type_checking(test: ast.expr) -> bool:
    if isinstance(test, ast.Name):
        return test.id == "TYPE_CHECKING"
    return isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"


@cache
def modules() -> dict[str, Path]:
    """Every module of raftcore by name: the Python files and the native extensions."""
    found = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    for stub in sorted((ROOT / "_native").glob("*.pyi")):
        if stub.stem != "__init__":
            found[f"raftcore._native.{stub.stem}"] = stub  # compiled: imports nothing of ours
    return found


@cache
def imports_of(name: str) -> tuple[Import, ...]:
    path = modules()[name]
    if path.suffix == ".pyi":
        return ()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: list[Import] = []

    def targets(node: ast.Import | ast.ImportFrom) -> list[str]:
        if isinstance(node, ast.Import):
            return [alias.name for alias in node.names]
        base = node.module or ""
        if node.level:
            anchor = package
            for _ in range(node.level - 1):
                anchor = anchor.rpartition(".")[0]
            base = f"{anchor}.{base}" if base else anchor
        return [
            f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules() else base
            for alias in node.names
        ]

    def walk(nodes: list[ast.stmt], in_function: bool) -> None:
        for node in nodes:
            if isinstance(node, ast.Import | ast.ImportFrom):
                found.extend(Import(t, node.lineno, in_function) for t in targets(node))
            elif isinstance(node, ast.If) and _is_type_checking(node.test):
                walk(node.orelse, in_function)
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                walk(node.body, True)
            else:  # a class body, if, try, with, for, while, match: what it holds runs too
                for field in ("body", "orelse", "finalbody"):
                    inner = getattr(node, field, None)
                    if isinstance(inner, list):
                        walk(inner, in_function)
                for branch in [*getattr(node, "handlers", ()), *getattr(node, "cases", ())]:
                    walk(branch.body, in_function)

    walk(ast.parse(path.read_text(), str(path)).body, False)
    return tuple(found)


def _none(problems: list) -> None:
    """Fail with one problem a line (an import, a chain of imports or a cycle)."""
    assert not problems, "\n" + "\n".join(map(str, problems))


def _in(name: str, packages: tuple[str, ...] | set[str]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in packages)


def _ours(target: str) -> bool:
    return _in(target, ("raftcore",))


def members(*packages: str) -> list[str]:
    return [m for m in modules() if _in(m, packages)]


def _where(name: str, imp: Import) -> str:
    return f"{modules()[name].relative_to(ROOT.parent)}:{imp.line} imports {imp.target}"


def _imports_outside(packages: tuple[str, ...], allowed: tuple[str, ...]) -> list[str]:
    """Each import of a raftcore module, by a module of ``packages``, of a module that is not
    in ``allowed`` (nor in the importer's own package)."""
    return [
        _where(m, imp)
        for m in members(*packages)
        for imp in imports_of(m)
        if _ours(imp.target) and imp.target != "raftcore" and not _in(imp.target, allowed)
    ]


# ---- (a) the layers ---------------------------------------------------------------------------


def test_the_parser_sees_the_imports_python_runs():
    """The checks below are only as good as the parser: it finds a module-level import, one in
    a function, a submodule named by ``from P import m``, and skips ``if TYPE_CHECKING:``."""
    log_snapshots = {i.target: i for i in imports_of("raftcore.log.snapshots")}
    assert "raftcore.offsets" in log_snapshots
    assert "raftcore.log.segmented_log" not in log_snapshots  # under TYPE_CHECKING only
    assert "raftcore.raft.fetch" in {i.target for i in imports_of("raftcore.raft.core")}
    stream = imports_of("raftcore.spark.stream")
    assert any(i.target == "raftcore.spark.source" and i.in_function for i in stream)
    assert len(members("raftcore.raft")) > 20 and len(members("raftcore._native")) >= 7


def test_shared_values_and_errors_import_nothing_of_raftcore():
    _none(_imports_outside(SHARED, allowed=()))


def test_the_protocol_imports_only_itself_and_the_shared_modules():
    _none(_imports_outside(("raftcore.protocol",), allowed=("raftcore.protocol", *SHARED)))


def test_snapshots_import_neither_the_log_nor_the_core_nor_the_node():
    allowed = ("raftcore.snapshot", *SHARED, *STORAGE_BASE)
    _none(_imports_outside(("raftcore.snapshot",), allowed))


def test_the_log_imports_neither_the_core_nor_the_node():
    allowed = ("raftcore.log", "raftcore.snapshot", *SHARED, *STORAGE_BASE)
    _none(_imports_outside(("raftcore.log",), allowed))


def test_the_raft_core_imports_only_storage_and_shared_modules():
    """The core reads the log through its ReplicatedLog protocol (raftcore.log is not
    imported) and knows nothing of the protocol's codecs, the node or the clients."""
    allowed = (
        "raftcore.raft",
        "raftcore.snapshot",
        "raftcore.log_limit",  # rate-limited refusal lines, on the clock the core is given
        *SHARED,
        *STORAGE_BASE,
    )
    _none(_imports_outside(("raftcore.raft",), allowed))


def test_the_cluster_metadata_imports_only_itself_and_the_shared_modules():
    """raftcore.metadata (records, image, placement) is pure like the core: it builds on the
    shared values and errors alone, and loads neither the core, the log nor the node."""
    _none(_imports_outside(("raftcore.metadata",), allowed=("raftcore.metadata", *SHARED)))


def test_the_group_coordinator_imports_only_itself_and_the_shared_modules():
    """raftcore.groups (the classic consumer group coordinator) is a pure state machine like
    the core: the node drives it, it drives nothing."""
    allowed = ("raftcore.groups", "raftcore.topic_partition", *SHARED)
    _none(_imports_outside(("raftcore.groups",), allowed))


def test_the_in_memory_fakes_import_the_core_values_and_protocols_never_the_node():
    """raftcore.testing (the in-memory log and quorum-state store of the simulation and the
    tests) sits on the core's values and protocols, beside the durable pieces it stands in
    for: it imports the core's modules, the snapshots and the storage base, and loads neither
    raftcore.raft.core nor the node through them."""
    allowed = ("raftcore.testing", "raftcore.raft", "raftcore.snapshot", *SHARED, *STORAGE_BASE)
    problems = _imports_outside(("raftcore.testing",), allowed)
    for module in members("raftcore.testing"):
        via = _loads(module)
        banned = [m for m in via if _in(m, ("raftcore.node", "raftcore.raft.core"))]
        if banned:
            problems.append(_chain(via, banned[0]))
    _none(problems)


def test_security_imports_only_the_protocol_and_shared_modules():
    """TLS, SASL and the authorization checks sit between the protocol and its users (the node
    and the clients): neither the command line nor the node (its error answers come from
    raftcore.protocol.error_answers, CommandLineError from raftcore.errors)."""
    allowed = ("raftcore.security", "raftcore.protocol", "raftcore.log_limit", *SHARED)
    _none(_imports_outside(("raftcore.security",), allowed))


def test_the_kafka_api_never_imports_the_node():
    """raftcore.kafka sees the node as a Partition; the rule holds from the package's start."""
    _none(
        [
            _where(m, imp)
            for m in members("raftcore.kafka")
            for imp in imports_of(m)
            if _in(imp.target, ("raftcore.node",))
        ]
    )


def test_the_command_line_sits_at_the_top():
    """raftcore.cli holds the commands and imports what they run; no module of raftcore
    imports it but ``python -m raftcore`` (raftcore.__main__)."""
    _none(
        [
            _where(m, imp)
            for m in modules()
            if not _in(m, ("raftcore.cli", "raftcore.__main__"))
            for imp in imports_of(m)
            if _in(imp.target, ("raftcore.cli",))
        ]
    )


def _loads(name: str) -> dict[str, str | None]:
    """Every raftcore module loaded, at once or by a function call, when ``name`` is: each
    with the module that imported it (None for ``name``)."""
    via: dict[str, str | None] = {name: None}
    todo = deque([name])  # breadth first: each chain is a shortest one
    while todo:
        module = todo.popleft()
        for imp in imports_of(module):
            if not _ours(imp.target):
                continue
            parts = imp.target.split(".")
            for i in range(1, len(parts) + 1):
                loaded = ".".join(parts[:i])  # the packages above it run their __init__ too
                if loaded in modules() and loaded not in via:
                    via[loaded] = module
                    todo.append(loaded)
    return via


def _chain(via: dict[str, str | None], end: str) -> str:
    chain = [end]
    while (before := via[chain[-1]]) is not None:
        chain.append(before)
    return " <- ".join(chain)


@pytest.mark.parametrize("package", ["raftcore.client", "raftcore.spark", "raftcore.security"])
def test_clients_spark_and_security_never_load_the_node_nor_the_core(package):
    """They speak the protocol: no module of theirs loads raftcore.node or raftcore.raft.core,
    directly or through what it imports (raftcore.client loaded 23 node modules through
    raftcore.node.config)."""
    problems = []
    for module in members(package):
        via = _loads(module)
        banned = [m for m in via if _in(m, ("raftcore.node", "raftcore.raft.core"))]
        if banned:  # the first one reached says how
            problems.append(_chain(via, banned[0]))
    _none(problems)


# What each layer below the node may use of the standard library's I/O and concurrency, and
# why (STYLE.md: nothing in the core imports socket, asyncio, threading or time).
_IO = ("asyncio", "socket", "ssl", "selectors", "threading", "subprocess", "multiprocessing")
_IO_RULES = [
    # (packages, modules of _IO or time that are refused there)
    (("raftcore.raft",), (*_IO, "time", "concurrent")),
    (("raftcore.metadata",), (*_IO, "time", "concurrent")),
    (("raftcore.groups",), (*_IO, "time", "concurrent")),
    (("raftcore.protocol",), _IO),
    # The log and the snapshot store are read from the fsync thread and the loop: they lock.
    (("raftcore.log", "raftcore.snapshot"), ("asyncio", "socket", "ssl", "selectors")),
    (SHARED, _IO),
]
_IO_RULE_NAMES = ["core", "metadata", "groups", "protocol", "log-and-snapshots", "shared"]
_IO_EXCEPTIONS = {
    # An asyncio.BufferedProtocol that cuts frames out of what its owner's transport reads:
    # shared by the node's and the client's connections, it opens no socket and starts nothing.
    ("raftcore.protocol.framing", "asyncio"),
    # Says in words why a connection failed: it names asyncio's, socket's and ssl's exceptions
    # (timeouts, refused connections, certificates); it opens nothing.
    ("raftcore.connect_errors", "asyncio"),
    ("raftcore.connect_errors", "socket"),
    ("raftcore.connect_errors", "ssl"),
}


@pytest.mark.parametrize("packages, refused", _IO_RULES, ids=_IO_RULE_NAMES)
def test_nothing_below_the_node_opens_sockets_or_starts_threads(packages, refused):
    """The core does no I/O and keeps no time (the clock is passed in); the protocol and the
    shared modules open nothing either; the log and the snapshots lock but never touch the
    network. The exceptions, each with its reason, are in _IO_EXCEPTIONS."""
    _none(
        [
            _where(m, imp)
            for m in members(*packages)
            for imp in imports_of(m)
            if _in(imp.target, refused) and (m, imp.target) not in _IO_EXCEPTIONS
        ]
    )


_RUNTIME_CHECK = """
import sys
import raftcore.log, raftcore.snapshot, raftcore.raft.values, raftcore.raft.voters
import raftcore.security, raftcore.security.client_config, raftcore.spark, raftcore.client
import raftcore.testing
loaded = [m for m in sys.modules if m.startswith(("raftcore.node", "raftcore.raft.core"))]
import raftcore.kafka.server  # above the core: it may load the core, never the node
loaded = sorted({*loaded, *(m for m in sys.modules if m.startswith("raftcore.node"))})
from raftcore.raft import OffsetAndEpoch, RaftCore
from raftcore.offsets import OffsetAndEpoch as Shared
assert OffsetAndEpoch is Shared and RaftCore.__module__ == "raftcore.raft.core"
from raftcore.raft import InMemoryLog, MemoryQuorumStateStore
assert (InMemoryLog, MemoryQuorumStateStore) == (
    raftcore.testing.InMemoryLog, raftcore.testing.MemoryQuorumStateStore)
print(" ".join(loaded))
"""


def test_python_itself_loads_neither_node_nor_core_for_the_lower_layers_and_the_clients():
    """The same rules seen by a fresh interpreter: importing the log, the snapshots, the core's
    values, security, spark, the client, the in-memory fakes and the Kafka API loads no module
    of raftcore.node and not raftcore.raft.core, and ``from raftcore.raft import RaftCore`` (and
    ``InMemoryLog``, ``MemoryQuorumStateStore``, from raftcore.testing) still works."""
    out = subprocess.run(
        [sys.executable, "-c", _RUNTIME_CHECK],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT.parent,
    )
    _none(out.stdout.split())


# ---- (b) no cycle -----------------------------------------------------------------------------


def _cycles(*, in_functions: bool) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), over module-level
    imports, or over all runtime imports with ``in_functions``."""
    graph = {
        m: sorted(
            {
                i.target
                for i in imports_of(m)
                if i.target in modules() and i.target != m and (in_functions or not i.in_function)
            }
        )
        for m in modules()
    }
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 4 * len(graph)))
    try:
        for v in graph:
            if v not in index:
                visit(v)
    finally:
        sys.setrecursionlimit(limit)
    return found


def test_no_module_cycle_through_module_level_imports():
    """A cycle of module-level imports makes a module's names depend on which of the two was
    imported first (polling <-> vote was one: the election backoff has its own module now)."""
    _none(_cycles(in_functions=False))


def test_cycles_through_imports_in_functions_are_only_the_known_ones():
    unknown = [c for c in _cycles(in_functions=True) if frozenset(c) not in KNOWN_DEFERRED_CYCLES]
    _none(unknown)
