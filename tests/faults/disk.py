"""The disk nemesis (``--disk``): the disks of running nodes go wrong while the fault nemesis
kills, pauses and partitions. One action every 2-5 s, in its own thread:

- ``flip``: one byte flipped in place in a sealed segment of a running node (a data batch's
  payload, past its 61-byte header; never a control batch, whose damage stops the node by
  design, nor the active segment). The node must find it (its scrubber runs at 64 MiB/s, a pass
  every 2 s) and repair it from the leader; the consumers must never see the damaged value
  (the checker compares values). One damaged batch at a time: no flip while the last one is not
  yet seen repaired (the node's ``repaired the damaged batch B..`` line); after 30 s without a
  repair it is given up on (``flip-unrepaired``). A node tracks one damage at a time (the
  lowest), and its scrubber reports the first damage of each segment and scrubs again only
  10 s after a pass that found some (``raftcore.node.scrubber``), so flips piled on one node
  would wait their turn for tens of seconds. After the fault phase the harness waits (bounded)
  for the last flip's repair (``settle``); a flipped batch still damaged in its segment then is
  a ``damage-left`` violation (``damage_left``).
- ``fill``: one node's data directory lives on a small tmpfs (``DISK_SIZE``, mounted under the
  run directory, unmounted at the end); a filler file takes all its room for 2-4 s, then is
  deleted. A leader that cannot write resigns, a follower exits non-zero with one CRITICAL
  line; once the room is back the nemesis starts an exited node again (``fill-exit``, and a
  ``restart`` event), as after a kill. The fill holds the node set's lock, so no other nemesis
  starts a node on the full disk meanwhile.

Not done: deleting a stopped node's ``quorum-state``. With the harness's static voter set
(``--voters``) the node then refuses to start (``LostQuorumStateError``, docs/cluster.md), which
would take a voter away for good; the membership nemesis's ``replace`` already covers a
replica coming back under a new directory id.

The counts (``disk_*`` figures): flips, repairs seen, flips given up, fills, nodes that exited
during a fill, leaders that resigned for a full disk (their ``the log cannot be written``
lines).
"""

from __future__ import annotations

import contextlib
import errno
import os
import random
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from raftcore.errors import CorruptRecordError
from raftcore.records import iter_batches, sound_batch

from .nemesis import Event
from .nodes import NodeSet

__all__ = ["DISK_NODE_ARGS", "DISK_SIZE", "FLIP_REPAIR_TIMEOUT_S", "DiskNemesis", "SmallDisk"]

BATCH_HEADER = 61  # bytes of a v2 record batch's header; the payload follows
DISK_SIZE = "64m"
FLIP_REPAIR_TIMEOUT_S = 30.0

# Sealed segments soon (some 700 one-record batches each), found within seconds
DISK_NODE_ARGS = [
    "--segment-bytes",
    str(64 << 10),
    "--log-scrub-bytes-per-second",
    str(64 << 20),
    "--log-scrub-interval-ms",
    "2000",
]

REPAIRED = "repaired the damaged batch "
FOUND = "] damaged batch at offset "
RESIGNED = "so that a voter that can write leads"  # the leader's ERROR line, once a resignation


class SmallDisk:
    """A tmpfs of ``size`` at ``<run dir>/small-disk``; ``node-N`` a symlink to a directory on
    it (so that the membership nemesis's wipe moves the link aside). Unmounted by ``close``."""

    def __init__(self, run_dir: Path, node_id: int, size: str = DISK_SIZE) -> None:
        self.mount = run_dir / "small-disk"
        self.node_id = node_id
        self.mount.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(self.mount)],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"cannot mount a tmpfs at {self.mount}: {done.stderr.strip()}")
        self.mounted = True
        (self.mount / f"node-{node_id}").mkdir()
        (run_dir / f"node-{node_id}").symlink_to(self.mount / f"node-{node_id}")
        self.filler = self.mount / "filler"

    def fill(self) -> int:
        """Write the filler until the file system is full; the bytes written."""
        fd = os.open(self.filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        written = 0
        try:
            for size in (1 << 20, 1 << 12, 1):
                chunk = b"\0" * size
                while True:
                    try:
                        written += os.write(fd, chunk)
                    except OSError as exc:
                        if exc.errno != errno.ENOSPC:
                            raise
                        break
        finally:
            os.close(fd)
        return written

    def unfill(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.filler.unlink()

    def close(self) -> None:
        """Copy the node's files off the tmpfs (into ``node-N`` in place of the link, for the
        run directory), then unmount (lazily if busy). Call once the node is stopped."""
        if not self.mounted:
            return
        self.unfill()
        link = self.mount.parent / f"node-{self.node_id}"
        on_tmpfs = self.mount / f"node-{self.node_id}"
        with contextlib.suppress(OSError):
            if link.is_symlink():
                link.unlink()
                shutil.copytree(on_tmpfs, link, symlinks=True)
            else:  # moved aside by a wipe
                shutil.copytree(on_tmpfs, link.with_name(link.name + ".small-disk"), symlinks=True)
        if subprocess.run(["umount", str(self.mount)], check=False).returncode != 0:
            subprocess.run(["umount", "-l", str(self.mount)], check=False)
        self.mounted = False


@dataclass
class Flip:
    node_id: int
    segment: Path
    base_offset: int
    batch_position: int
    batch_size: int
    position: int  # of the flipped byte
    log_since: int = 0  # the node log's size before the flip
    t: float = 0.0  # monotonic

    def still_damaged(self) -> bool:
        """The batch is still at its place in the segment and fails its check."""
        try:
            with open(self.segment, "rb") as f:
                f.seek(self.batch_position)
                data = f.read(self.batch_size)
        except FileNotFoundError:
            return False
        if len(data) < self.batch_size or int.from_bytes(data[:8], "big") != self.base_offset:
            return False  # truncated, or rewritten by other batches
        try:
            sound_batch(data)
        except CorruptRecordError:
            return True
        return False


def flip_a_payload_byte(log_dir: Path, rng: random.Random) -> Flip | None:
    """Flip one random payload byte of a random data batch in a random sealed segment (every
    one but the newest), in place."""
    segments = sorted(log_dir.glob("*.log"))[:-1]
    rng.shuffle(segments)
    for segment in segments:
        try:
            data = segment.read_bytes()
        except FileNotFoundError:
            continue
        try:
            batches = [
                b for b in iter_batches(data) if not b.is_control and b.size_in_bytes > BATCH_HEADER
            ]
        except Exception:  # a torn tail or a batch damaged already: another segment
            continue
        if not batches:
            continue
        batch = rng.choice(batches)
        pos = batch.position + rng.randrange(BATCH_HEADER, batch.size_in_bytes)
        try:
            with open(segment, "r+b") as f:
                f.seek(pos)
                byte = f.read(1)
                f.seek(pos)
                f.write(bytes([byte[0] ^ (1 << rng.randrange(8))]))
        except FileNotFoundError:
            continue
        return Flip(0, segment, batch.base_offset, batch.position, batch.size_in_bytes, pos)
    return None


class DiskNemesis(threading.Thread):
    def __init__(
        self,
        seed: int,
        nodes: NodeSet,
        disk: SmallDisk | None,
        *,
        log: Callable[[str], None] = print,
    ) -> None:
        super().__init__(name="disk-nemesis", daemon=True)
        self.rng = random.Random(seed * 7919 + 23)
        self.nodes = nodes
        self.disk = disk
        self.log = log
        self.events: list[Event] = []
        self.errors: list[str] = []
        self.counts = dict.fromkeys(
            ("flips", "flips_repaired", "flips_unrepaired", "fills", "fill_exits"), 0
        )
        self.flips: list[Flip] = []
        self.pending: Flip | None = None  # the last flip, not yet seen repaired
        self._halt = threading.Event()

    def now(self) -> float:
        return time.monotonic() - self.nodes.t0

    def stop(self) -> None:
        self._halt.set()
        self.join(30)

    def run(self) -> None:
        try:
            while not self._halt.wait(self.rng.uniform(2.0, 5.0)):
                self._check_pending()
                kinds = ["flip", "flip", "fill"] if self.disk is not None else ["flip"]
                kind = self.rng.choice(kinds)
                if kind == "flip":
                    self._flip()
                else:
                    self._fill(self.rng.uniform(2.0, 4.0))
        except Exception as exc:  # a harness bug: said, not swallowed
            import traceback

            self.errors.append(f"disk nemesis: {exc!r}\n{traceback.format_exc()}")
        finally:
            if self.disk is not None:
                self.disk.unfill()

    # ---- flips ----------------------------------------------------------------------------------

    def _log_size(self, node_id: int) -> int:
        try:
            return self.nodes.log_file(node_id).stat().st_size
        except FileNotFoundError:
            return 0

    def _check_pending(self, give_up: bool = True) -> None:
        flip = self.pending
        if flip is None:
            return
        try:
            with open(self.nodes.log_file(flip.node_id), "rb") as f:
                f.seek(flip.log_since)
                text = f.read().decode(errors="replace")
        except FileNotFoundError:
            text = ""
        what = f"batch {flip.base_offset}"
        if f"{REPAIRED}{flip.base_offset}.." in text:
            self.counts["flips_repaired"] += 1
            self._record(Event(self.now(), "flip-repaired", [flip.node_id], what))
            self.pending = None
        elif give_up and time.monotonic() - flip.t > FLIP_REPAIR_TIMEOUT_S:
            self.counts["flips_unrepaired"] += 1
            self._record(Event(self.now(), "flip-unrepaired", [flip.node_id], what))
            self.pending = None

    def settle(self, timeout_s: float = FLIP_REPAIR_TIMEOUT_S) -> None:
        """After the fault phase (the nemesis stopped, the cluster healed): wait up to
        ``timeout_s`` for the last flip's repair."""
        deadline = time.monotonic() + timeout_s
        while self.pending is not None and time.monotonic() < deadline:
            self._check_pending(give_up=False)
            time.sleep(0.25)
        self._check_pending(give_up=True)
        if self.pending is not None:
            self.counts["flips_unrepaired"] += 1
            flip = self.pending
            self._record(
                Event(self.now(), "flip-unrepaired", [flip.node_id], f"batch {flip.base_offset}")
            )
            self.pending = None

    def damage_left(self) -> list[str]:
        """Flipped batches still damaged in their segments (read once the nodes stopped or
        settled)."""
        return [
            f"node {f.node_id}: batch {f.base_offset} in {f.segment.name} at byte "
            f"{f.batch_position} (flipped at byte {f.position}) still fails its check"
            for f in self.flips
            if f.still_damaged()
        ]

    def _flip(self) -> None:
        if self.pending is not None:  # one damaged batch at a time
            return
        with self.nodes.lock:
            running = self.nodes.running()
            if not running:
                return
            victim = self.rng.choice(running)
            since = self._log_size(victim)
            flip = flip_a_payload_byte(self.nodes.data_dir(victim) / "log", self.rng)
            if flip is None:
                return
            flip.node_id, flip.log_since, flip.t = victim, since, time.monotonic()
            self.flips.append(flip)
            self.pending = flip
            self.counts["flips"] += 1
            detail = f"batch {flip.base_offset}, {flip.segment.name} byte {flip.position}"
            self._record(Event(self.now(), "flip", [victim], detail))

    # ---- fills ----------------------------------------------------------------------------------

    def _fill(self, hold: float) -> None:
        assert self.disk is not None
        node_id = self.disk.node_id
        with self.nodes.lock:  # nobody starts a node on the full disk
            if node_id not in self.nodes.node_ids:
                return
            was_running = self.nodes.alive(node_id)  # not down from a kill meanwhile
            ev = Event(self.now(), "fill", [node_id], f"for {hold:.1f} s")
            written = self.disk.fill()
            ev.detail += f" ({written >> 20} MiB filler)"
            self.counts["fills"] += 1
            self._record(ev)
            self._halt.wait(hold)
            proc = self.nodes.procs.get(node_id)
            exited = was_running and proc is not None and proc.poll() is not None
            self.disk.unfill()
            ev.t_end = self.now()
            if exited and node_id not in self.nodes.paused:
                status = proc.returncode if proc is not None else None
                self.counts["fill_exits"] += 1
                self._record(Event(self.now(), "fill-exit", [node_id], f"status {status}"))
                self._record(Event(self.now(), "restart", [node_id]))
                try:
                    self.nodes.start(node_id, wait=True, timeout_s=30)
                except Exception as exc:
                    msg = f"node {node_id} did not restart cleanly after the fill: {exc}"
                    self.errors.append(msg)
                    self.log(msg)

    def _record(self, ev: Event) -> None:
        self.events.append(ev)
        self.log(ev.line())

    # ---- the figures ----------------------------------------------------------------------------

    def figures(self) -> dict[str, int]:
        """The counts, and what the node logs say: damage found, batches repaired, leaders
        that resigned for a write the log refused."""
        out = {f"disk_{k}": n for k, n in self.counts.items()}
        found = repaired = resigned = 0
        for i in self.nodes.ever():
            try:
                text = self.nodes.log_file(i).read_text(errors="replace")
            except FileNotFoundError:
                continue
            found += text.count(FOUND)
            repaired += text.count(REPAIRED)
            resigned += text.count(RESIGNED)
        out.update(disk_damage_found=found, disk_repairs=repaired, disk_resigned=resigned)
        return out
