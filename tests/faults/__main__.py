"""``python -m tests.faults --seed S --duration 40 --nodes 3|5 [--no-partitions] [--seeds N]``

Runs N seeded fault runs (seeds S, S+1, ...) against real node processes and prints the figures
of each; exits 1 at the first run with a violation, after printing its seed, its run directory
and the command that replays it. Needs root for network namespaces and nftables (partitions);
without them every node runs on loopback and the partition nemesis is skipped, with the reason.
``--snapshots N`` runs the nodes with LMDB state machines and KIP-630 snapshots every N records.
``--security SSL`` runs them with mutual TLS (every client presents a certificate too);
``--security SASL_SSL`` with clients logging in by SCRAM-SHA-512 over TLS.
``--membership`` adds the membership nemesis (``membership``): wiped nodes (or nodes that lost
their quorum-state file) replaced, the voter
set grown and shrunk between 3 and 5, leadership handed over, while the faults run.
``--disk`` adds the disk nemesis (``disk``): bytes flipped in sealed segments of running nodes,
one node's disk (a small tmpfs) filled for seconds.
"""

from __future__ import annotations

import argparse
import signal
import sys

from .harness import RunConfig, format_result, replay_command, run_once
from .security import MODES


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.faults", description=__doc__.split("\n")[2])
    p.add_argument("--seed", type=int, default=1, help="the first seed (default 1)")
    p.add_argument("--seeds", type=int, default=1, help="how many seeds to run (default 1)")
    p.add_argument("--duration", type=float, default=40.0, help="seconds of faults per run")
    p.add_argument("--nodes", type=int, choices=(3, 5), default=3)
    p.add_argument("--no-partitions", action="store_true", help="no partition nemesis")
    p.add_argument("--loopback", action="store_true", help="all nodes on 127.0.0.1 (no namespaces)")
    p.add_argument("--rate", type=float, default=60.0, help="values per second per writer")
    p.add_argument(
        "--snapshots",
        type=int,
        default=0,
        metavar="N",
        help="run the nodes with the LMDB state machine and a snapshot every N records "
        "(KIP-630), and check every replica's state and snapshots (default: off)",
    )
    p.add_argument(
        "--security",
        type=str.upper,
        choices=MODES,
        default="PLAINTEXT",
        help="PLAINTEXT (default); SSL: mutual TLS between the nodes and from every client; "
        "SASL_SSL: nodes by certificate, clients by SCRAM-SHA-512 over TLS",
    )
    p.add_argument(
        "--event-loop",
        choices=("asyncio", "uvloop"),
        default="asyncio",
        help="the nodes' event loop (default asyncio; uvloop needs the uvloop package)",
    )
    p.add_argument(
        "--membership",
        action="store_true",
        help="the membership nemesis too: wiped nodes replaced, the voters grown to 5 and "
        "shrunk to 3, leadership handed over, while the faults run",
    )
    p.add_argument(
        "--disk",
        action="store_true",
        help="the disk nemesis too: bytes flipped in sealed segments (repaired from the "
        "leader), one node's disk (a small tmpfs) filled for seconds",
    )
    p.add_argument("--keep", action="store_true", help="keep run directories of passed runs")
    p.add_argument("--dir", default=None, help="where run directories go (default: temp)")
    p.add_argument("--keep-going", action="store_true", help="run every seed even after a failure")
    p.add_argument(
        "--nodes-from",
        default=None,
        metavar="DIR",
        help="run the nodes from another raftcore tree (PYTHONPATH=DIR), e.g. an older commit "
        "extracted with git archive, to see that the harness catches its bugs",
    )
    args = p.parse_args(argv)

    # SIGTERM ends the run through its finally blocks (namespaces, processes, nft tables)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    failed = []
    for seed in range(args.seed, args.seed + args.seeds):
        config = RunConfig(
            seed=seed,
            duration_s=args.duration,
            nodes=args.nodes,
            partitions=not args.no_partitions,
            rate=args.rate,
            base_dir=args.dir,
            keep=args.keep,
            pythonpath=args.nodes_from,
            loopback=args.loopback,
            snapshots=args.snapshots,
            security=args.security,
            event_loop=args.event_loop,
            membership=args.membership,
            disk=args.disk,
        )
        result = run_once(config, log=lambda s: print(s, flush=True))
        print(format_result(result), flush=True)
        if not result.ok:
            failed.append(config)
            if not args.keep_going:
                break
    if failed:
        print(f"\n{len(failed)} failing seed(s):", ", ".join(str(c.seed) for c in failed))
        for c in failed:
            print(f"  replay: {replay_command(c)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
