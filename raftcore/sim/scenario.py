"""The randomized scenario of one simulated run, drawn from its seed."""

from __future__ import annotations

import random
from dataclasses import dataclass

__all__ = ["Scenario"]


@dataclass
class Scenario:
    """One randomized run, drawn from the seed (see :meth:`Scenario.from_seed`)."""

    seed: int
    voters: int = 3
    observers: int = 0
    drop: float = 0.0
    duplicate: float = 0.0
    delay_ms: tuple[int, int] = (1, 5)
    partitions: bool = False
    crashes: bool = False
    slow_node: int | None = None
    style: str = "mixed"
    crash_every_ms: tuple[int, int] = (1500, 6000)
    downtime_ms: tuple[int, int] = (200, 3000)
    crash_after_send: float = 0.0
    crash_after: tuple[str, ...] = ("FetchRequest", "VoteResponse")
    flush_delay_ms: tuple[int, int] = (0, 2)
    fault_ms: int = 15_000
    heal_ms: int = 30_000
    append_every_ms: int = 40
    records_per_append: int = 3
    # KIP-630: snapshots every this many offsets (0: off), the leader's replication lag
    # before it moves its log start past a lagging replica, and the share of FetchSnapshot
    # chunks the nemesis corrupts (a flipped byte, or a torn end announced as the whole).
    snapshot_every: int = 0
    max_replication_lag_ms: int = 30_000
    corrupt_snapshot_chunk: float = 0.0
    # The share of appends followed by a client's DeleteRecords at the leader (a random
    # committed offset): the log start must still move only by seed 003's rules.
    delete_records: float = 0.0
    # The share of appends followed by a linearizable read at the node that took it.
    reads: float = 0.25
    # How long the leader holds a fetch whose only news is the high watermark (0: at once).
    high_watermark_linger_ms: int = 5
    # KIP-853 (raftcore.sim.membership): voters added, removed, replaced and handed the lead
    # every reconfig_every_ms; with wipes, disks lost (a node comes back a new replica).
    reconfig: bool = False
    wipes: bool = False
    reconfig_every_ms: tuple[int, int] = (1000, 4000)
    # Bit rot (raftcore.sim.bit_rot): a bit flips in some replica's log every so often
    # (None: never), repaired from an intact copy (protocol-aware recovery).
    bit_rot_every_ms: tuple[int, int] | None = None
    # Full disks: now and then a node's disk (its log and quorum-state) refuses every write
    # for a while, the leader's more often than not; the operator frees them all when the
    # faults stop.
    full_disks: bool = False
    full_disk_every_ms: tuple[int, int] = (1500, 6000)
    full_disk_ms: tuple[int, int] = (200, 4000)

    @classmethod
    def from_seed(
        cls,
        seed: int,
        voters: int,
        observers: int | None = None,
        *,
        snapshots: str = "seeded",
        membership: str = "seeded",
        bit_rot: str = "seeded",
        full_disks: str = "seeded",
    ) -> Scenario:
        """Draw a scenario. Styles: "mixed" (everything, at a moderate rate), "crashy"
        (frequent short crashes, sometimes of every node at once, and crashes right after a
        node sends an acknowledgement or a vote -- the narrow windows where a missing fsync
        or an unpersisted vote shows), "slow-disk" (fsyncs that take up to 300 ms),
        "vote-crash" (a voter often dies right after granting a vote and is back within
        milliseconds, while a competing candidate's request is still on its way)."""
        rng = random.Random(f"scenario-{seed}")
        style = rng.choice(["mixed", "mixed", "crashy", "slow-disk", "vote-crash"])
        sc = cls(
            seed=seed,
            voters=voters,
            observers=rng.choice([0, 0, 1, 2]) if observers is None else observers,
            drop=rng.choice([0.0, 0.0, 0.01, 0.05, 0.1]),
            duplicate=rng.choice([0.0, 0.01, 0.05]),
            delay_ms=rng.choice([(1, 3), (1, 10), (2, 40), (5, 100)]),
            partitions=rng.random() < 0.7,
            crashes=rng.random() < 0.7,
            slow_node=rng.choice([None, None, 1]),
            style=style,
            fault_ms=rng.choice([8_000, 15_000, 25_000]),
        )
        if style == "crashy":
            sc.crashes = True
            sc.crash_every_ms = (150, 1500)
            sc.downtime_ms = (10, 800)
            sc.crash_after_send = rng.choice([0.01, 0.03])
            sc.flush_delay_ms = (0, 30)
        elif style == "slow-disk":
            sc.flush_delay_ms = (0, 300)
        elif style == "vote-crash":
            sc.crashes = True
            sc.crash_every_ms = (800, 3000)
            sc.downtime_ms = (1, 60)
            sc.crash_after_send = 0.3
            sc.crash_after = ("VoteResponse",)
            sc.delay_ms = (5, 100)
        # Snapshots are drawn from their own generator: with them off, every seed runs as it
        # did before snapshots existed.
        snap = random.Random(f"snapshots-{seed}")
        if snapshots == "on" or (snapshots == "seeded" and snap.random() < 0.75):
            sc.snapshot_every = snap.choice([20, 40, 80, 150])
            sc.max_replication_lag_ms = snap.choice([300, 1000, 3000, 10_000])
            sc.corrupt_snapshot_chunk = snap.choice([0.0, 0.05, 0.2])
            sc.delete_records = snap.choice([0.0, 0.0, 0.02, 0.1])
        # Drawn from its own generator too, so that every other choice stays as it was.
        sc.high_watermark_linger_ms = random.Random(f"hw-linger-{seed}").choice([0, 5, 5, 50])
        # Reconfiguration in half the runs, with a spare replica to add; wipes in half of those.
        reconfig = random.Random(f"reconfig-{seed}")
        if membership == "on" or (membership == "seeded" and reconfig.random() < 0.5):
            sc.reconfig = True
            sc.wipes = reconfig.random() < 0.5
            sc.observers = max(sc.observers, 1) if observers is None else sc.observers
            sc.reconfig_every_ms = reconfig.choice([(300, 1500), (1000, 4000)])
        # Bit rot in one run in three, in runs without reconfiguration: a wiped replica is a
        # faulty copy of every batch too, and a voter removed may take the only other intact
        # copy of a batch with it (seeds 42 and 190: a 2-voter set whose leader held a damaged
        # batch that only observers held intact). Protocol-aware recovery assumes at most one
        # faulty copy where two make a majority, and repairs from the leader.
        rot = random.Random(f"bit-rot-scenario-{seed}")
        drawn = bit_rot == "on" or (bit_rot == "seeded" and rot.random() < 1 / 3)
        if drawn and not sc.reconfig:
            sc.bit_rot_every_ms = rot.choice([(200, 1000), (1000, 4000)])
        # Full disks in one run of three, from their own generator too.
        disks = random.Random(f"full-disks-{seed}")
        if full_disks == "on" or (full_disks == "seeded" and disks.random() < 1 / 3):
            sc.full_disks = True
            sc.full_disk_every_ms = disks.choice([(500, 3000), (1500, 6000)])
            sc.full_disk_ms = disks.choice([(50, 1000), (200, 4000)])
        return sc

    def describe(self) -> str:
        return (
            f"{self.style}: {self.voters} voters + {self.observers} observers, drop "
            f"{self.drop}, dup {self.duplicate}, delay {self.delay_ms}, partitions "
            f"{self.partitions}, crashes {self.crashes} every {self.crash_every_ms}, "
            f"crash-after-send {self.crash_after_send}, flush {self.flush_delay_ms}, "
            f"slow {self.slow_node}, faults {self.fault_ms} ms, "
            f"high-watermark linger {self.high_watermark_linger_ms} ms"
            + (
                f", snapshots every {self.snapshot_every} offsets (lag "
                f"{self.max_replication_lag_ms} ms, corrupt chunks {self.corrupt_snapshot_chunk}, "
                f"delete records {self.delete_records})"
                if self.snapshot_every
                else ", no snapshots"
            )
            + (
                f", reconfiguration every {self.reconfig_every_ms} ms"
                + (" with wiped disks" if self.wipes else "")
                if self.reconfig
                else ""
            )
            + (f", bit rot every {self.bit_rot_every_ms} ms" if self.bit_rot_every_ms else "")
            + (
                f", full disks every {self.full_disk_every_ms} ms for {self.full_disk_ms} ms"
                if self.full_disks
                else ""
            )
        )
