"""One set of fixtures for the suite (docs/testing.md, Fixtures): node processes come from the
``cluster`` fixture of conftest.py (told what to start by ``pytest.mark.cluster``), in-process
nodes from ``node_helpers.cluster``. A test module that defines a ``cluster`` of its own (a
fixture or a context manager) is one more copy to drift from the others: this fails on it.

Read from the modules' text with ``ast``; nothing is imported or started to check it.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent

# Where the suite's clusters are defined: nowhere else.
HOMES = {"conftest.py", "node_helpers.py", "cluster_helpers.py"}


def own_clusters(paths: list[Path]) -> list[str]:
    """One line per module-level function named ``cluster`` outside the shared homes."""
    problems = []
    for path in paths:
        if path.name in HOMES:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in tree.body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == "cluster":
                problems.append(
                    f"{path.name}:{node.lineno} defines its own cluster: use conftest.py's "
                    "cluster fixture (pytest.mark.cluster) or node_helpers.cluster"
                )
    return problems


def test_no_test_module_defines_its_own_cluster():
    problems = own_clusters(sorted(TESTS.glob("*.py")))
    assert not problems, "\n".join(problems)


def test_the_check_flags_a_cluster_fixture_or_context_manager_and_only_that(tmp_path):
    cases = {
        "test_fixture.py": "import pytest\n\n@pytest.fixture\ndef cluster(tmp_path):\n"
        "    yield None\n",
        "test_context.py": "import contextlib\n\n@contextlib.asynccontextmanager\n"
        "async def cluster(tmp_path):\n    yield []\n",
        "test_uses_it.py": "def test_x(cluster):\n    assert cluster\n",
        "test_imports_it.py": "from node_helpers import cluster\n\ndef test_y():\n"
        "    assert cluster\n",
        "test_a_method.py": "class Nodes:\n    def cluster(self):\n        return 1\n",
        "node_helpers.py": "async def cluster(tmp_path):\n    return []\n",
    }
    for name, text in cases.items():
        (tmp_path / name).write_text(text)
    flagged = [line.split(":")[0] for line in own_clusters(sorted(tmp_path.iterdir()))]
    assert flagged == ["test_context.py", "test_fixture.py"]
