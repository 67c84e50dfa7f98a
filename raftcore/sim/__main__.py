"""Run the seeded fault simulation.

    python -m raftcore.sim --nodes N --seeds COUNT --start-seed S

``--nodes`` takes one size or a comma list (3,5): seeds alternate between them. Exits 1 at
the first violation, printing the scenario, the violation, the end of the event trace and a
one-line command that replays the seed with its full trace.
"""

from __future__ import annotations

import argparse
import logging
import multiprocessing
import sys
import time
from typing import Any

from raftcore.sim.cluster import Scenario, SimResult, Simulation


def _run_one(args: tuple[int, int, int | None, str | None, bool, str, str, str, str]) -> SimResult:
    seed, voters, observers, plant, trace, snapshots, membership, bit_rot, full_disks = args
    if plant:
        from raftcore.sim import plants

        plants.apply(plant)
    scenario = Scenario.from_seed(
        seed,
        voters,
        observers,
        snapshots=snapshots,
        membership=membership,
        bit_rot=bit_rot,
        full_disks=full_disks,
    )
    return Simulation(scenario, trace=trace).run()


def replay_command(
    seed: int,
    voters: int,
    observers: int | None,
    plant: str | None,
    *,
    snapshots: str = "seeded",
    membership: str = "seeded",
    bit_rot: str = "seeded",
    full_disks: str = "seeded",
) -> str:
    cmd = f"python -m raftcore.sim --nodes {voters} --seeds 1 --start-seed {seed} --trace"
    if observers is not None:
        cmd += f" --observers {observers}"
    if snapshots != "seeded":
        cmd += f" --snapshots {snapshots}"
    if membership != "seeded":
        cmd += f" --membership {membership}"
    if bit_rot != "seeded":
        cmd += f" --bit-rot {bit_rot}"
    if full_disks != "seeded":
        cmd += f" --full-disks {full_disks}"
    if plant:
        cmd += f" --plant {plant}"
    return cmd


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m raftcore.sim",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--nodes", default="3", help="voters per cluster: 3, or 3,5")
    parser.add_argument("--seeds", type=int, default=100, help="how many seeds to run")
    parser.add_argument("--start-seed", type=int, default=0)
    parser.add_argument(
        "--observers",
        type=int,
        default=None,
        help="observers per cluster (default: drawn from the seed, 0-2)",
    )
    parser.add_argument("--jobs", type=int, default=1, help="worker processes")
    parser.add_argument("--trace", action="store_true", help="print the full event trace")
    parser.add_argument(
        "--plant",
        default=None,
        help="run against a deliberately broken core (see raftcore.sim.plants)",
    )
    parser.add_argument(
        "--snapshots",
        choices=["seeded", "on", "off"],
        default="seeded",
        help="KIP-630 snapshots: drawn per seed (3 in 4 runs), always, or never (off: every "
        "seed runs as before snapshots existed)",
    )
    parser.add_argument(
        "--membership",
        choices=["seeded", "on", "off"],
        default="seeded",
        help="KIP-853 reconfiguration (voters added, removed, replaced after a wiped disk, "
        "leadership handed over): drawn per seed (1 in 2 runs), always, or never",
    )
    parser.add_argument(
        "--bit-rot",
        choices=["seeded", "on", "off"],
        default="seeded",
        help="bit rot in the replicas' logs, repaired from intact copies (protocol-aware "
        "recovery): drawn per seed (1 in 3 runs), always, or never",
    )
    parser.add_argument(
        "--full-disks",
        choices=["seeded", "on", "off"],
        default="seeded",
        help="full disks (a node's log and quorum-state refuse every write for a while, the "
        "leader's more often than not): drawn per seed (1 in 3 runs), always, or never",
    )
    parser.add_argument(
        "--scenario",
        choices=["random", "majority-wipe"],
        default="random",
        help="random: the seeded faults above; majority-wipe: a majority of the voters lose "
        "their disks and come back empty, and no survivor may truncate a committed record "
        "(raftcore.sim.majority_wipe; --observers and the fault options do not apply)",
    )
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    # The simulated network reorders and duplicates; the cores log what they survive.
    logging.basicConfig(level=logging.CRITICAL)
    sizes = [int(n) for n in args.nodes.split(",")]
    if any(n < 1 for n in sizes) or args.seeds < 1:
        parser.error("--nodes and --seeds must be positive")
    if args.scenario == "majority-wipe":
        return _majority_wipes(args, sizes)
    jobs = [
        (
            seed,
            sizes[i % len(sizes)],
            args.observers,
            args.plant,
            args.trace,
            args.snapshots,
            args.membership,
            args.bit_rot,
            args.full_disks,
        )
        for i, seed in enumerate(range(args.start_seed, args.start_seed + args.seeds))
    ]
    started = time.perf_counter()
    events = done = 0
    outcomes = {"acknowledged": 0, "failed": 0, "indeterminate": 0}
    # what each kind of fault did, summed over the runs it was in: (runs, counts)
    tallies: dict[str, tuple[int, dict[str, int]]] = {}
    if args.plant:
        from raftcore.sim import plants

        plants.apply(args.plant)
    pool = multiprocessing.get_context("fork").Pool(args.jobs) if args.jobs > 1 else None
    results = pool.imap(_run_one, jobs, chunksize=4) if pool else map(_run_one, jobs)
    try:
        for job, result in zip(jobs, results, strict=False):
            done += 1
            events += result.events
            for kind, count in result.outcomes.items():
                outcomes[kind] = outcomes.get(kind, 0) + count
            for title, counts in _tallies(result):
                if counts:
                    runs, total = tallies.get(title, (0, {}))
                    for kind, count in counts.items():
                        total[kind] = total.get(kind, 0) + count
                    tallies[title] = (runs + 1, total)
            if args.trace:
                print("\n".join(result.trace))
            if not result.ok:
                seed, voters = job[0], job[1]
                print(f"VIOLATION at seed {seed}: {result.violation}")
                print(f"scenario: {result.scenario.describe()}")
                print(
                    f"at simulated time {result.sim_time_ms} ms after {result.events} events; "
                    f"last events:"
                )
                for line in result.trace[-40:]:
                    print("  " + line)
                command = replay_command(
                    seed,
                    voters,
                    args.observers,
                    args.plant,
                    snapshots=args.snapshots,
                    membership=args.membership,
                    bit_rot=args.bit_rot,
                    full_disks=args.full_disks,
                )
                print(f"replay: {command}")
                return 1
            if not args.quiet and done % 100 == 0:
                rate = done / (time.perf_counter() - started)
                print(f"{done}/{len(jobs)} seeds ok ({rate:.1f} seeds/s)", file=sys.stderr)
    finally:
        if pool:
            pool.terminate()
    elapsed = time.perf_counter() - started
    print(
        f"{done} seeds ok (nodes {args.nodes}, seeds {args.start_seed}.."
        f"{args.start_seed + done - 1}), {events} events, {elapsed:.1f} s; appends "
        + ", ".join(f"{count} {kind}" for kind, count in outcomes.items())
    )
    for title, (runs, total) in tallies.items():
        print(f"{title} in {runs} runs: " + ", ".join(f"{n} {kind}" for kind, n in total.items()))
    return 0


def _run_wipe(args: tuple[int, int, str | None, bool]) -> Any:
    from raftcore.sim.majority_wipe import run_majority_wipe

    seed, voters, plant, trace = args
    return run_majority_wipe(seed, voters, trace=trace, plant=plant)


def _majority_wipes(args: argparse.Namespace, sizes: list[int]) -> int:
    """``--scenario majority-wipe``: one wipe per seed; exits 1 at the first violation."""
    start = args.start_seed
    jobs = [
        (seed, sizes[i % len(sizes)], args.plant, args.trace)
        for i, seed in enumerate(range(start, start + args.seeds))
    ]
    if args.plant:
        from raftcore.sim import plants

        plants.apply(args.plant)
    started = time.perf_counter()
    done = refused = survivors = acknowledged = 0
    pool = multiprocessing.get_context("fork").Pool(args.jobs) if args.jobs > 1 else None
    reports = pool.imap(_run_wipe, jobs, chunksize=4) if pool else map(_run_wipe, jobs)
    try:
        for (seed, voters, _, _), report in zip(jobs, reports, strict=False):
            done += 1
            survivors += len(report.survivors)
            refused += len(report.refusals)
            acknowledged += report.acknowledged
            result = report.result
            if args.trace:
                print("\n".join(result.trace))
            if not result.ok:
                print(f"VIOLATION at seed {seed} ({voters} voters): {result.violation}")
                print(f"wiped {report.wiped}, survivors {report.survivors} at {report.protected}")
                for line in result.trace[-40:]:
                    print("  " + line)
                cmd = (
                    f"python -m raftcore.sim --scenario majority-wipe --nodes {voters} "
                    f"--seeds 1 --start-seed {seed} --trace"
                )
                print("replay: " + cmd + (f" --plant {args.plant}" if args.plant else ""))
                return 1
            if not args.quiet and done % 100 == 0:
                rate = done / (time.perf_counter() - started)
                print(f"{done}/{len(jobs)} seeds ok ({rate:.1f} seeds/s)", file=sys.stderr)
    finally:
        if pool:
            pool.terminate()
    elapsed = time.perf_counter() - started
    print(
        f"{done} majority wipes ok (nodes {args.nodes}, seeds {start}..{start + done - 1}), "
        f"{elapsed:.1f} s; {acknowledged} records acknowledged before the wipes, every one kept; "
        f"{refused} of {survivors} survivors refused to truncate and stopped"
    )
    return 0


def _tallies(result: SimResult) -> list[tuple[str, dict[str, int]]]:
    """The summary's lines after the appends, in order: a title and one run's counts."""
    return [
        ("snapshots", result.snapshots),
        ("voter changes", result.membership),
        ("bit rot", result.bit_rot),
        ("full disks", result.disks),
    ]


if __name__ == "__main__":
    sys.exit(main())
