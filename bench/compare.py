"""This checkout against another commit, side by side: the commit-path benchmarks of both,
alternating, and the ratios.

A regression nobody measured is still a regression: a change to the commit path runs this
against the commit before it and writes the ratios in its commit message.

    PYTHONPATH=. python bench/compare.py HEAD~1                  # the default cases, 2 rounds
    PYTHONPATH=. python bench/compare.py d131a1f --rounds 3 --cases small-1,batched-1000

REV's checkout is made once (``git worktree add --detach``) under ``--cache`` and its native
modules built in place with this interpreter. Each side runs its own checkout's benchmark files
with its own ``raftcore`` first on the import path (the client and the nodes are that side's).
Rounds alternate which side goes first (this, REV; REV, this; ...), so a machine that slows
down over the run does not favour one side. Each case's figure is the benchmark's own
(``extra_info``: writes/s, records/s, appends/s; the commit-path script's p50 latency), and the
ratio is this checkout's median over REV's median (> 1: this checkout is better, for latency
too). The figures are as noisy as the machine: run it on a quiet one, and read the spread of
the rounds before the ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from statistics import median

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Case:
    """One figure: a benchmark's node id and the ``extra_info`` key it reports (or, for the
    commit-path script, its p50 latency in ms, where lower is better)."""

    name: str
    node_id: str
    key: str
    higher_is_better: bool = True


CASES = {
    case.name: case
    for case in (
        Case(
            "small-1",
            "bench/test_bench_small_writes.py::test_raftcore_small_writes[asyncio-1]",
            "writes_per_s",
        ),
        Case(
            "small-16",
            "bench/test_bench_small_writes.py::test_raftcore_small_writes[asyncio-16]",
            "writes_per_s",
        ),
        Case(
            "small-256",
            "bench/test_bench_small_writes.py::test_raftcore_small_writes[asyncio-256]",
            "writes_per_s",
        ),
        Case(
            "batched-1000",
            "bench/test_bench_cluster.py::test_raftcore_cluster_commits[this-1000-plaintext]",
            "records_per_s",
        ),
        Case(
            "batched-10000",
            "bench/test_bench_cluster.py::test_raftcore_cluster_commits[this-10000-plaintext]",
            "records_per_s",
        ),
        Case(
            "embedded-1024",
            "bench/test_bench_embedded_append.py::test_raftcore_embedded_appends[1024]",
            "appends_per_s",
        ),
        Case("commit-path", "bench/commit_path.py", "p50_ms", higher_is_better=False),
    )
}
DEFAULT = "small-1,small-16,small-256,batched-1000,commit-path"


def checkout(rev: str, cache: Path) -> Path:
    """REV's checkout under ``cache``, made and built once."""
    sha = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--verify", f"{rev}^{{commit}}"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    where = cache / sha[:12]
    if not (where / ".built").exists():
        if not where.exists():
            subprocess.run(
                ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(where), sha],
                check=True,
                capture_output=True,
            )
        print(f"compare: building {rev} ({sha[:12]}) in {where}", flush=True)
        built = subprocess.run(
            [sys.executable, "setup.py", "build_ext", "--inplace", "-q"],
            cwd=where,
            check=False,
            capture_output=True,
            text=True,
        )
        if built.returncode:
            sys.exit(f"compare: building {rev} in {where} failed:\n{built.stderr[-3000:]}")
        (where / ".built").touch()
    return where


def run_case(case: Case, side: Path, smoke: bool, requests: int) -> float | None:
    """The case's figure on one side, or None where that side has no such benchmark or it
    failed (said on stderr)."""
    env = {**os.environ, "PYTHONPATH": str(side)}
    if case.name == "commit-path":
        script = side / case.node_id
        if not script.exists():
            print(f"compare: {side} has no {case.node_id}", file=sys.stderr)
            return None
        n = 50 if smoke else requests
        done = subprocess.run(  # noqa: PLW1510 (the exit code is read)
            [sys.executable, str(script), "--requests", str(n)],
            cwd=side,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        found = re.search(r"p50 ([0-9.]+) ms", done.stdout)
        if done.returncode or not found:
            print(f"compare: {case.name} failed on {side}:\n{done.stderr[-2000:]}", file=sys.stderr)
            return None
        return float(found.group(1))
    if not (side / case.node_id.split("::")[0]).exists():
        print(f"compare: {side} has no {case.node_id}", file=sys.stderr)
        return None
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "bench.json"
        args = [
            sys.executable,
            "-m",
            "pytest",
            case.node_id,
            "-q",
            "-p",
            "no:cacheprovider",
            f"--benchmark-json={out}",
            "--rootdir",
            str(side),
        ]
        if smoke:
            args.append("--benchmark-disable")
        done = subprocess.run(  # noqa: PLW1510 (the exit code is read)
            args, cwd=side, env=env, capture_output=True, text=True, timeout=1800
        )
        if smoke and not done.returncode:  # smoke mode writes no figures
            return float("nan")
        if done.returncode or not out.exists():
            print(f"compare: {case.name} failed on {side}:\n{done.stdout[-2000:]}", file=sys.stderr)
            return None
        benchmarks = json.loads(out.read_text()).get("benchmarks", [])
        return float(benchmarks[0]["extra_info"][case.key]) if benchmarks else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("rev", help="the commit to compare with (any git revision)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--cases", default=DEFAULT, help=f"of {', '.join(CASES)}")
    parser.add_argument("--requests", type=int, default=2000, help="the commit-path script's")
    parser.add_argument(
        "--cache", type=Path, default=Path(tempfile.gettempdir()) / "raftcore-compare"
    )
    parser.add_argument("--smoke", action="store_true", help="each benchmark once, tiny")
    args = parser.parse_args()
    unknown = [c for c in args.cases.split(",") if c not in CASES]
    if unknown:
        parser.error(f"unknown case(s) {', '.join(unknown)}: choose from {', '.join(CASES)}")
    cases = [CASES[c] for c in args.cases.split(",")]
    args.cache.mkdir(parents=True, exist_ok=True)
    other = checkout(args.rev, args.cache)
    figures: dict[tuple[str, str], list[float]] = {}
    for n in range(args.rounds):
        order = [("this", ROOT), (args.rev, other)]
        if n % 2:
            order.reverse()
        for case in cases:
            for label, side in order:
                value = run_case(case, side, args.smoke, args.requests)
                print(f"compare: round {n + 1} {case.name} {label}: {value}", flush=True)
                if value is not None:
                    figures.setdefault((case.name, label), []).append(value)
    head = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
        check=False,
        capture_output=True,
        text=True,
    ).stdout.strip()
    print(
        f"\nthis checkout ({head}{', with changes' if _dirty() else ''}) against {args.rev}, "
        f"{args.rounds} rounds alternating, on {os.uname().nodename} ({os.cpu_count()} cores)"
    )
    print(f"{'case':<15} {'this':>28} {args.rev:>28} {'ratio':>7}")
    for case in cases:
        ours, theirs = figures.get((case.name, "this"), []), figures.get((case.name, args.rev), [])
        ratio = "-"
        if ours and theirs and all(v == v and v > 0 for v in (median(ours), median(theirs))):
            r = median(ours) / median(theirs)
            ratio = f"{r if case.higher_is_better else 1 / r:.2f}x"
        print(f"{case.name:<15} {_fmt(ours):>28} {_fmt(theirs):>28} {ratio:>7}")


def _fmt(values: list[float]) -> str:
    return " / ".join(f"{v:,.2f}" if v < 100 else f"{v:,.0f}" for v in values) or "-"


def _dirty() -> bool:
    return bool(
        subprocess.run(
            ["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
            check=False,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )


if __name__ == "__main__":
    main()
