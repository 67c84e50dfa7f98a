"""mypy over the whole package, held to a baseline.

The packages named in CLEAN must have no error at all. Every other package (or top-level
module) may have at most the errors counted in ``.ci/mypy-baseline.txt``: the count only goes
down. When a change removes errors, this says so, and the baseline is lowered in the same
change (``python .ci/typecheck.py --write``).

Usage: ``python .ci/typecheck.py`` (exit 1 on a new error), ``--write`` to record the counts.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BASELINE = ROOT / ".ci" / "mypy-baseline.txt"
CLEAN = (
    "raftcore/raft",
    "raftcore/log",
    "raftcore/snapshot",
    "raftcore/protocol",
    "raftcore/kafka",
    "raftcore/testing",
    "raftcore/metadata",
    "raftcore/groups",
)
ERROR = re.compile(r"^(raftcore/[A-Za-z0-9_]+(?:\.pyi?)?)[/:].*: error: ")


def count_errors() -> tuple[Counter[str], list[str]]:
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "raftcore"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode not in (0, 1):  # 2: mypy itself failed
        sys.exit(f"typecheck: mypy did not run: {result.stderr.strip() or result.stdout[-500:]}")
    counts: Counter[str] = Counter()
    lines = []
    for line in result.stdout.splitlines():
        match = ERROR.match(line)
        if match:
            counts[match.group(1)] += 1
            lines.append(line)
    return counts, lines


def read_baseline() -> dict[str, int]:
    baseline = {}
    for line in BASELINE.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, count = line.split()
            baseline[name] = int(count)
    return baseline


def main() -> int:
    counts, lines = count_errors()
    if "--write" in sys.argv[1:]:
        body = "".join(f"{name} {counts[name]}\n" for name in sorted(counts))
        BASELINE.write_text(
            "# mypy errors per package that .ci/typecheck.py allows (only ever lowered)\n" + body
        )
        print(f"typecheck: baseline written: {sum(counts.values())} errors")
        return 0
    baseline = read_baseline()
    failures = {}
    for name, count in sorted(counts.items()):
        allowed = 0 if name.startswith(CLEAN) else baseline.get(name, 0)
        if count > allowed:
            failures[name] = f"{name}: {count} errors, {allowed} allowed"
    lowered = [
        f"{name}: {counts.get(name, 0)} (baseline {allowed})"
        for name, allowed in sorted(baseline.items())
        if counts.get(name, 0) < allowed
    ]
    total = sum(counts.values())
    if failures:
        print("\n".join(line for line in lines if ERROR.match(line).group(1) in failures))
        print("typecheck: new mypy errors: " + "; ".join(failures.values()), file=sys.stderr)
        return 1
    if lowered:
        print(
            "typecheck: fewer errors than the baseline, lower it (--write): " + ", ".join(lowered)
        )
    print(
        f"typecheck: ok, {total} errors (baseline {sum(baseline.values())}); clean: "
        + ", ".join(CLEAN)
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
