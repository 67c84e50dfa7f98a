"""The seeded fault simulation: 1,000 seeds on every run (3 and 5 voters, every fault), each
planted bug caught by its seed, and runs that replay exactly."""

import os
import subprocess
import sys

import pytest

from raftcore.sim import Scenario, Simulation

SIM_SEEDS = int(os.environ.get("RAFTCORE_SIM_SEEDS", "1000"))

# The planted bugs of raftcore.sim.plants and the first seed that catches each
# (python -m raftcore.sim --nodes 3,5 --seeds 5000 --plant NAME; see docs/testing.md).
PLANTED = [
    ("hw-without-own-epoch", 0, 3),
    ("second-vote", 3, 5),
    ("truncate-one-too-far", 6, 3),
    ("ack-before-flush", 69, 5),
    ("forget-vote", 504, 3),
]


def run_sim(tmp_path, *args):
    return subprocess.run(
        [sys.executable, "-m", "raftcore.sim", *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=900,
        cwd=tmp_path,  # import the installed raftcore, not the checkout
    )


def test_a_thousand_seeds_of_3_and_5_voters_with_every_fault_keep_every_invariant(tmp_path):
    result = run_sim(
        tmp_path,
        "--nodes",
        "3,5",
        "--seeds",
        str(SIM_SEEDS),
        "--start-seed",
        "0",
        "--jobs",
        str(min(4, os.cpu_count() or 1)),
        "--quiet",
    )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
    assert f"{SIM_SEEDS} seeds ok" in result.stdout


@pytest.mark.parametrize(("plant", "seed", "nodes"), PLANTED, ids=[p[0] for p in PLANTED])
def test_the_simulation_catches_a_planted_bug(tmp_path, plant, seed, nodes):
    result = run_sim(
        tmp_path, "--nodes", str(nodes), "--seeds", "1", "--start-seed", str(seed), "--plant", plant
    )
    assert result.returncode == 1, result.stdout[-3000:]
    assert f"VIOLATION at seed {seed}" in result.stdout
    # a one-line replay command, and the end of the event trace
    assert (
        f"replay: python -m raftcore.sim --nodes {nodes} --seeds 1 --start-seed {seed} "
        f"--trace --plant {plant}"
    ) in result.stdout
    assert "last events:" in result.stdout


def test_the_correct_core_passes_the_seeds_that_catch_the_plants():
    for _, seed, nodes in PLANTED:
        result = Simulation(Scenario.from_seed(seed, nodes)).run()
        assert result.ok, (seed, result.violation)


def test_a_seed_replays_exactly():
    a = Simulation(Scenario.from_seed(42, 3), trace=True).run()
    b = Simulation(Scenario.from_seed(42, 3), trace=True).run()
    assert a.events == b.events and a.trace == b.trace and a.sim_time_ms == b.sim_time_ms


def test_scenarios_cover_every_fault():
    scenarios = [Scenario.from_seed(s, 3) for s in range(200)]
    assert {s.style for s in scenarios} == {"mixed", "crashy", "slow-disk", "vote-crash"}
    assert any(s.drop for s in scenarios) and any(s.duplicate for s in scenarios)
    assert any(s.partitions for s in scenarios) and any(s.crashes for s in scenarios)
    assert any(s.observers for s in scenarios) and any(s.slow_node for s in scenarios)
    assert any(s.delay_ms[1] >= 40 for s in scenarios)  # reordering
