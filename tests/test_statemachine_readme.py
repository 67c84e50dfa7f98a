"""The README's key/value example runs as written (on free ports, in a temporary directory)."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from raftcore.node.local_cluster import free_ports

pytestmark = pytest.mark.timeout(60)

README = Path(__file__).resolve().parent.parent / "README.md"


def example() -> str:
    text = README.read_text(encoding="utf-8")
    match = re.search(
        r"<!-- readme-test: python kv-example -->\s*```python\n(.*?)```", text, re.DOTALL
    )
    assert match, "the README lost its kv-example block"
    return match.group(1)


@pytest.mark.slow
def test_the_readme_key_value_example_runs_and_every_replica_agrees(tmp_path, capsys):
    code = example()
    assert len(code.splitlines()) <= 30  # about 20 lines of substance
    body, run_line = code.rstrip().rsplit("\n", 1)
    assert run_line.startswith("asyncio.run(main(")
    namespace: dict = {"__name__": "readme_example"}
    exec(compile(body, str(README), "exec"), namespace)
    asyncio.run(asyncio.wait_for(namespace["main"](str(tmp_path), tuple(free_ports(3))), 45))
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "b'red'"
    assert sorted(lines[1:]) == ["1 b'red' None", "2 b'red' None", "3 b'red' None"]
