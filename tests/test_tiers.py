"""The fast tier (``pytest -m "not slow"``, docs/development.md) holds no test that starts
processes: a test module that starts node processes, the command line, the simulation's long
runs, the fault harness or a Spark session is marked ``slow`` as a whole
(``pytestmark = pytest.mark.slow``, or ``pytest.mark.slow`` in its ``pytestmark`` list).

Read from the modules' text with ``ast``; nothing is imported or started to check it.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

TESTS = Path(__file__).resolve().parent

# What in a module's text says it starts processes of raftcore (or Spark's JVM):
STARTS_PROCESSES = {
    "a LocalCluster": re.compile(r"\bLocalCluster\("),
    "node processes (pytest.mark.cluster, running_cluster, shared_cluster)": re.compile(
        r"\bmark\.cluster\(|\brunning_cluster\(|\bshared_cluster\b"
    ),
    "a node process (start_node)": re.compile(r"\bstart_node\("),
    "a raftcore command (python -m raftcore...)": re.compile(r"""["']-m["'],\s*["']raftcore"""),
    "the fault harness": re.compile(r"^from faults\b", re.MULTILINE),
    "a Spark session": re.compile(r"\bSparkSession\b|^pytestmark\b.*\bmark\.spark\b", re.MULTILINE),
}


def module_marks(tree: ast.Module) -> list[str]:
    """The ``pytest.mark.<name>`` names of the module's ``pytestmark``, as written."""
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets
        ):
            value = node.value
            values = value.elts if isinstance(value, ast.List | ast.Tuple) else [value]
            marks = []
            for one in values:
                mark = one.func if isinstance(one, ast.Call) else one
                if isinstance(mark, ast.Attribute):
                    marks.append(mark.attr)
            return marks
    return []


def unmarked_process_modules(paths: list[Path]) -> list[str]:
    """One line per test module that starts processes and is not ``slow`` as a whole."""
    problems = []
    for path in paths:
        text = path.read_text()
        started = [what for what, pattern in STARTS_PROCESSES.items() if pattern.search(text)]
        if started and "slow" not in module_marks(ast.parse(text, str(path))):
            problems.append(f"{path.name} starts {', '.join(started)} but is not marked slow")
    return problems


def test_every_test_module_that_starts_processes_is_marked_slow_as_a_whole():
    modules = [p for p in sorted(TESTS.glob("test_*.py")) if p.name != Path(__file__).name]
    problems = unmarked_process_modules(modules)
    assert not problems, "\n".join(problems)


def test_the_check_sees_a_module_level_mark_and_only_that(tmp_path):
    # the check itself: a process module is flagged until its pytestmark holds slow
    body = "from raftcore.node.local_cluster import LocalCluster\n\ndef test_x(tmp_path):\n"
    body += "    with LocalCluster(tmp_path):\n        pass\n"
    cases = {
        "test_bare.py": body,
        "test_timeout_only.py": "import pytest\npytestmark = pytest.mark.timeout(60)\n" + body,
        "test_slow_on_a_test.py": body.replace("def test_x", "@pytest.mark.slow\ndef test_x"),
        "test_slow.py": "import pytest\npytestmark = pytest.mark.slow\n" + body,
        "test_slow_in_list.py": "import pytest\n"
        "pytestmark = [pytest.mark.timeout(60), pytest.mark.slow]\n" + body,
        "test_in_process.py": "def test_y():\n    assert True\n",
        "test_fixture_bare.py": "import pytest\npytestmark = pytest.mark.cluster(3)\n\n"
        "def test_z(cluster):\n    assert cluster\n",
    }
    for name, text in cases.items():
        (tmp_path / name).write_text(text)
    flagged = [line.split()[0] for line in unmarked_process_modules(sorted(tmp_path.iterdir()))]
    assert flagged == [
        "test_bare.py",
        "test_fixture_bare.py",
        "test_slow_on_a_test.py",
        "test_timeout_only.py",
    ]
