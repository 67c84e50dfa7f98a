"""The checks after a run, over the writers' history, every node's log read from disk (nodes
stopped) and what two consumers read, all below the converged high watermark:

- every acknowledged value is in the committed log, at the offset it was acknowledged with
  (``lost``: nowhere; ``misplaced``: elsewhere, the acknowledged offset holding something else);
- no value twice (``duplicated``); nothing the writers never sent (``phantom``); no value whose
  attempt certainly failed (``failed-but-written``); an indeterminate value at most once;
- each writer's order: acknowledged offsets increase with the sequence number, and within one
  client session the committed log holds the writer's values in sequence order
  (``out-of-order``);
- the committed log has no offset gaps;
- every node's log is the same below the high watermark, batch by batch (base offset, last
  offset, epoch, CRC), and reaches it (``divergent``);
- the consumers read exactly the committed data records (``consumer-mismatch``).

With snapshots on (KIP-630), records below a replica's log start offset are gone from its log.
The committed log is then the leader's from its log start, preceded by what the replica with
the lowest log start still holds below it (``merged_log``); the value checks run over it, and
each replica's batches from its own log start on must be the same as it. An acknowledged value
below that is looked for in the state machines and snapshots instead (``state_check``). A
consumer may read from below the final log start (it moved while it read): those records must
hold what was acknowledged there, in order.

These are Jepsen's queue checks (lost-write, duplicate, inconsistent-offsets, G1a) on one
partition, plus the replica comparison only a test with the data directories can make.
"""

from __future__ import annotations

import itertools
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from raftcore.log import SegmentedLog

from .history import History, parse_value
from .state_check import NodeState, check_states

__all__ = ["NodeLog", "Verdict", "check", "merged_log", "read_node_log"]

MAX_DETAILS = 8  # example lines per violation kind


@dataclass
class NodeLog:
    node_id: int
    end_offset: int
    batches: list[tuple[int, int, int, int]]  # (base offset, last offset, epoch, crc)
    records: list[tuple[int, bytes | None]]  # (offset, value) of the data records
    log_start: int = 0  # nothing below it is read (KIP-630: a snapshot holds it)


def read_node_log(node_id: int, data_dir: Path) -> NodeLog:
    """A node's log from disk (the node must be stopped: the log takes a directory lock)."""
    batches = []
    records: list[tuple[int, bytes | None]] = []
    with SegmentedLog.open(data_dir / "log") as log:
        end = log.end_offset
        start = log.log_start_offset
        for b in log.batches():
            if b.last_offset < start:
                continue
            batches.append((b.base_offset, b.last_offset, b.partition_leader_epoch, b.crc))
            if not b.is_control:
                records.extend((r.offset, r.value) for r in b.records() if r.offset >= start)
    return NodeLog(node_id, end, batches, records, start)


def merged_log(
    logs: dict[int, NodeLog], leader: int
) -> tuple[int, list[tuple[int, int, int, int]], list[tuple[int, bytes | None]]]:
    """(start, batches, data records) of the committed log as the replicas still hold it: the
    leader's log, preceded by what the replica with the lowest log start holds below it."""
    ref = logs[leader]
    lowest = min(logs.values(), key=lambda nl: nl.log_start)
    if lowest.log_start >= ref.log_start:
        return ref.log_start, ref.batches, ref.records
    first_base = ref.batches[0][0] if ref.batches else ref.log_start
    batches = [b for b in lowest.batches if b[0] < first_base] + ref.batches
    records = [(o, val) for o, val in lowest.records if o < ref.log_start] + ref.records
    return lowest.log_start, batches, records


@dataclass
class Verdict:
    figures: dict[str, int] = field(default_factory=dict)
    violations: dict[str, list[str]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.violations

    def add(self, kind: str, detail: str) -> None:
        self.violations.setdefault(kind, []).append(detail)


def check(
    history: History,
    high_watermark: int,
    logs: dict[int, NodeLog],
    leader: int,
    consumers: dict[str, list[tuple[int, bytes | None]] | None],
    states: dict[int, NodeState] | None = None,
) -> Verdict:
    """``states``: every replica's state machine and snapshots (snapshot mode), else None."""
    v = Verdict()
    start, merged_batches, merged_records = merged_log(logs, leader)
    committed = [(o, val) for o, val in merged_records if start <= o < high_watermark]
    at_offset = dict(committed)
    where: dict[bytes | None, list[int]] = defaultdict(list)
    for o, val in committed:
        where[val].append(o)

    attempts = history.attempts
    outcomes = Counter(a.outcome for a in attempts)
    v.figures.update(
        attempted=len(attempts),
        acknowledged=outcomes["ok"],
        failed=outcomes["fail"],
        indeterminate=outcomes["info"] + outcomes["pending"],
        committed_records=len(committed),
        high_watermark=high_watermark,
        checked_from=start,
        log_start_min=min(nl.log_start for nl in logs.values()),
        log_start_max=max(nl.log_start for nl in logs.values()),
    )

    # -- one value, one place ------------------------------------------------------------------
    dups = {val: offs for val, offs in where.items() if len(offs) > 1}
    v.figures["duplicated"] = len(dups)
    for val, offs in list(dups.items())[:MAX_DETAILS]:
        v.add("duplicated", f"{_show(val)} at offsets {offs}")
    phantoms = [
        (o, val)
        for o, val in committed
        if parse_value(val) is None or history.by_value(val) is None
    ]
    v.figures["phantom"] = len(phantoms)
    for o, val in phantoms[:MAX_DETAILS]:
        v.add("phantom", f"offset {o} holds {_show(val)}, which no writer sent")

    # -- every acknowledged value where it was acknowledged --------------------------------------
    lost = misplaced = info_present = failed_present = below_start = 0
    for a in attempts:
        offs = where.get(a.value, [])
        if a.outcome == "ok":
            if not offs and a.offset < start and states is not None:
                below_start += 1  # gone from the log: the state checks look for it
            elif not offs:
                lost += 1
                if lost <= MAX_DETAILS:
                    v.add(
                        "lost",
                        f"{a.value.decode()} acknowledged at offset {a.offset} "
                        f"(t={a.t_complete:.2f} s) is not in the committed log; offset "
                        f"{a.offset} holds {_held(at_offset, a.offset)}",
                    )
            elif a.offset not in offs:
                misplaced += 1
                if misplaced <= MAX_DETAILS:
                    v.add(
                        "misplaced",
                        f"{a.value.decode()} acknowledged at offset {a.offset} is at {offs}; "
                        f"offset {a.offset} holds {_held(at_offset, a.offset)}",
                    )
        elif a.outcome == "fail" and offs:
            failed_present += 1
            if failed_present <= MAX_DETAILS:
                v.add(
                    "failed-but-written",
                    f"{a.value.decode()} failed ({a.error}) but is at offset {offs}",
                )
        elif a.outcome in ("info", "pending") and offs:
            info_present += 1
    v.figures.update(
        lost=lost,
        misplaced=misplaced,
        failed_but_written=failed_present,
        indeterminate_committed=info_present,
        acknowledged_below_log_start=below_start,
    )

    # -- each writer's order ---------------------------------------------------------------------
    out_of_order = 0
    by_writer: dict[str, list] = defaultdict(list)
    for a in attempts:
        if a.outcome == "ok":
            by_writer[a.writer].append(a)
    for writer, acked in sorted(by_writer.items()):
        acked.sort(key=lambda a: a.seq)
        for prev, cur in itertools.pairwise(acked):
            if cur.offset <= prev.offset:
                out_of_order += 1
                if out_of_order <= MAX_DETAILS:
                    v.add(
                        "out-of-order",
                        f"{writer}: seq {prev.seq} acknowledged at {prev.offset} but seq "
                        f"{cur.seq} at {cur.offset}",
                    )
    last_seen: dict[tuple[str, int], tuple[int, int]] = {}  # (writer, session) -> (seq, offset)
    for o, val in committed:
        parsed = parse_value(val)
        a = history.by_value(val) if parsed else None
        if a is None:
            continue
        key = (a.writer, a.session)
        prev = last_seen.get(key)
        if prev is not None and a.seq < prev[0]:
            out_of_order += 1
            if out_of_order <= MAX_DETAILS:
                v.add(
                    "out-of-order",
                    f"{a.writer} session {a.session}: seq {a.seq} at offset {o} after seq "
                    f"{prev[0]} at offset {prev[1]}",
                )
        last_seen[key] = (a.seq, o)
    v.figures["out_of_order"] = out_of_order

    # -- the committed log, replica by replica ----------------------------------------------------
    merged = [b for b in merged_batches if b[0] < high_watermark]
    expected_next = merged[0][0] if merged else start
    for b in merged:
        if b[0] != expected_next:
            v.add(
                "gap", f"node {leader}: batch at {b[0]} follows one ending at {expected_next - 1}"
            )
            break
        expected_next = b[1] + 1
    divergent = 0
    for node_id, nl in sorted(logs.items()):
        # from this replica's own log start on (all of it without snapshots)
        reference = [b for b in merged if b[0] >= nl.log_start]
        mine = [b for b in nl.batches if nl.log_start <= b[0] < high_watermark]
        problem = None
        if nl.end_offset < high_watermark:
            problem = f"log ends at {nl.end_offset}, below the high watermark {high_watermark}"
        elif mine != reference:
            for i, (x, y) in enumerate(zip(mine, reference, strict=False)):
                if x != y:
                    problem = (
                        f"batch #{i} differs: (base, last, epoch, crc) {x} where node {leader} "
                        f"has {y}"
                    )
                    break
            else:
                problem = f"{len(mine)} batches below the high watermark, node {leader} has " + str(
                    len(reference)
                )
        if problem:
            divergent += 1
            v.add("divergent", f"node {node_id}: {problem}")
    v.figures["divergent_nodes"] = divergent

    # -- what consumers read -----------------------------------------------------------------------
    # From the leader's final log start on a consumer reads every committed record; below it
    # (the log start moved while it read, and it went on from the new one) what it read must
    # be what the logs or, where they no longer reach, the history say is there.
    leader_start = logs[leader].log_start
    expected = [(o, val) for o, val in committed if o >= leader_start]
    mismatches = 0
    for name, read in consumers.items():
        if read is None:
            continue  # not run (reported by the caller)
        early = [(o, val) for o, val in read if o < leader_start]
        wrong = _early_read_problem(early, history, start, at_offset)
        if wrong:
            mismatches += 1
            v.add("consumer-mismatch", f"{name}, below the log start {leader_start}: {wrong}")
            continue
        got = read[len(early) :]
        if got != expected:
            mismatches += 1
            first = next(
                (i for i, (x, y) in enumerate(zip(got, expected, strict=False)) if x != y),
                min(len(got), len(expected)),
            )
            v.add(
                "consumer-mismatch",
                f"{name} read {len(got)} records from {leader_start}, the log has "
                f"{len(expected)}; first difference at #{first}: read {_pair(got, first)}, "
                f"log {_pair(expected, first)}",
            )
    v.figures["consumer_mismatch"] = mismatches

    if states is not None:
        applied_floor = committed[-1][0] + 1 if committed else 0
        check_states(v, history, states, committed, applied_floor)
    return v


def _early_read_problem(
    early: list[tuple[int, bytes | None]],
    history: History,
    start: int,
    at_offset: dict[int, bytes | None],
) -> str | None:
    """What is wrong with records a consumer read below the leader's final log start: offsets
    not increasing; from ``start`` on, not what the logs hold; below it (gone from every log,
    only the history can judge) a value no writer sent or one acknowledged at another
    offset."""
    prev = -1
    for o, val in early:
        if o <= prev:
            return f"offset {o} read after {prev}"
        prev = o
        if o >= start:
            if o not in at_offset or at_offset[o] != val:
                return f"read {_show(val)} at offset {o}, which holds {_held(at_offset, o)}"
            continue
        a = history.by_value(val) if parse_value(val) else None
        if a is None or a.outcome == "fail":
            return f"offset {o} holds {_show(val)}, which no writer sent (or it failed)"
        if a.outcome == "ok" and a.offset != o:
            return f"offset {o} holds {a.value.decode()}, acknowledged at {a.offset}"
    return None


def _show(value: bytes | None) -> str:
    if value is None:
        return "null"
    text = value[:40].decode(errors="replace")
    return repr(text) + ("..." if len(value) > 40 else "")


def _held(at_offset: dict[int, bytes | None], offset: int) -> str:
    if offset not in at_offset:
        return "no data record (a control record, or past the log)"
    return _show(at_offset[offset])


def _pair(items: list[tuple[int, bytes | None]], i: int) -> str:
    if i >= len(items):
        return "<end>"
    o, val = items[i]
    return f"({o}, {_show(val)})"
