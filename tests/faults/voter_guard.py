"""What the nemeses may do to the voters: the voter set the membership nemesis means, the disks
it wiped, and the rules that keep every fault and every change within what the cluster
survives.

A voter is a key, (node id, directory id). Its disk is *intact* while the node of that id runs
on that directory (a wiped disk gave the node a new directory id: the old key's data is gone
for good); it is *available* when it is intact and its node is neither down nor paused. For
each voter set that may be in force -- the one the nemesis holds for current, and the one a
change in flight (or one whose outcome is not known yet) would make -- the rules are:

- a change (add or remove) is made only if the new set keeps a majority of voters with intact
  disks (``why_not_change``), and only while a majority of both sets is available (it could
  not commit otherwise: the nemesis waits instead);
- a wipe only if every set keeps that intact majority without the wiped key
  (``why_not_wipe``);
- a kill or a pause only if every set keeps a majority available (``why_not_take_down``):
  faults never take down a majority of the current voters. The fault nemesis's
  ``kill-majority`` is the one exception, on purpose: it kills a majority of the current
  voters and restarts them on the same disks 1-3 s later, so the cluster loses its quorum
  for that long and nothing more.

Nothing here does I/O: the nemeses call it under ``NodeSet.lock`` with the nodes that are down
or paused now.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from raftcore.raft.voters import directory_id_text

__all__ = ["Key", "VoterGuard", "key_text", "majority"]

Key = tuple[int, bytes | None]  # (node id, directory id)


def majority(n: int) -> int:
    return n // 2 + 1


def key_text(key: Key) -> str:
    """``3:bAwnVHL-RS5cxvxGUC0tNA``, as the nodes' log lines name replicas."""
    node_id, directory = key
    return str(node_id) if directory is None else f"{node_id}:{directory_id_text(directory)}"


def _ids(keys: list[Key] | set[Key]) -> str:
    return ",".join(f"n{i}" for i, _ in sorted(keys, key=lambda k: k[0])) or "none"


@dataclass
class VoterGuard:
    voters: set[Key] = field(default_factory=set)  # in force, as the nemesis was told
    pending: set[Key] | None = None  # the set a change in flight, or unresolved, would make
    disks: dict[int, bytes | None] = field(default_factory=dict)  # node -> its disk's id now
    wiped: set[Key] = field(default_factory=set)  # keys whose disk the nemesis wiped
    removed: set[Key] = field(default_factory=set)  # keys the cluster said it removed
    added: set[Key] = field(default_factory=set)  # keys the cluster said it added

    def sets(self) -> list[set[Key]]:
        return [self.voters] + ([self.pending] if self.pending is not None else [])

    def voter_ids(self) -> list[int]:
        """The ids of every voter of every set that may be in force."""
        return sorted({i for s in self.sets() for i, _ in s})

    def key_of(self, node_id: int) -> Key | None:
        """The voter key of ``node_id`` in the set in force, if it is a voter."""
        return next((k for k in self.voters if k[0] == node_id), None)

    def intact(self, voters: set[Key]) -> set[Key]:
        return {k for k in voters if k not in self.wiped and self.disks.get(k[0]) == k[1]}

    def available(self, voters: set[Key], out: set[int]) -> set[Key]:
        """Voters with intact disks whose node is not in ``out`` (down or paused)."""
        return {k for k in self.intact(voters) if k[0] not in out}

    # ---- the rules ----------------------------------------------------------------------------

    def why_not_take_down(self, victims: set[int], out: set[int]) -> str | None:
        """None if ``victims`` may go down (killed or paused) besides ``out``; else why not."""
        for voters in self.sets():
            left = self.available(voters, out | victims)
            if len(left) < majority(len(voters)):
                return (
                    f"{_ids({(v, None) for v in victims})} down would leave "
                    f"{len(left)} of {len(voters)} voters available ({_ids(left)})"
                )
        return None

    def why_not_wipe(self, node_id: int, out: set[int]) -> str | None:
        """None if ``node_id``'s disk may be wiped now; else why not."""
        if node_id in out:
            return f"n{node_id} is down or paused"
        for voters in self.sets():
            left = {k for k in self.intact(voters) if k[0] != node_id}
            if len(left) < majority(len(voters)):
                return (
                    f"wiping n{node_id} would leave {len(left)} of {len(voters)} voters with "
                    f"intact disks ({_ids(left)})"
                )
        return self.why_not_take_down({node_id}, out)

    def why_not_change(self, new: set[Key], out: set[int]) -> tuple[str, str] | None:
        """None if the voter set may change to ``new`` now; else (``unsafe`` or ``wait``,
        why): ``unsafe`` changes are never made, ``wait`` ones could not commit now."""
        if self.pending is not None:
            return "wait", "a change is in flight or its outcome is not known yet"
        intact = self.intact(new)
        if len(intact) < majority(len(new)):
            return "unsafe", (
                f"voters {_ids(new)} would have {len(intact)} with intact disks, "
                f"fewer than a majority"
            )
        for voters in (self.voters, new):
            up = self.available(voters, out)
            if len(up) < majority(len(voters)):
                return "wait", (
                    f"{len(up)} of voters {_ids(voters)} available "
                    f"({_ids({(i, None) for i in out})} down or paused)"
                )
        return None

    # ---- what the cluster said ------------------------------------------------------------------

    def begin(self, new: set[Key]) -> None:
        """A change to ``new`` is sent: both sets constrain the faults until it is resolved."""
        self.pending = set(new)

    def done(self, added: Key | None = None, removed: Key | None = None) -> None:
        """The cluster said the change in flight is made (committed)."""
        assert self.pending is not None
        self.voters = self.pending
        self.pending = None
        if added is not None:
            self.added.add(added)
            self.removed.discard(added)
        if removed is not None:
            self.removed.add(removed)

    def resolve(self, seen: set[Key]) -> str:
        """The voter set seen, settled (no change pending), after a change the cluster did not
        say it made: ``before`` or ``after`` (and that set is held), or ``neither`` (a wrong
        voter set: the set held is left as it was)."""
        if seen == self.voters:
            self.pending = None
            return "before"
        if self.pending is not None and seen == self.pending:
            self.voters, self.pending = self.pending, None
            return "after"
        return "neither"

    def violations(self, seen: set[Key], members: list[int]) -> list[str]:
        """The voter set the settled cluster reports at the end against what the nemesis
        meant: every change it was told succeeded in force, no wiped disk's old key a voter,
        no key it was told removed a voter, every member a voter."""
        out = []
        if seen != self.voters:
            out.append(
                f"the cluster's voters are {_keys(seen)}; the nemesis meant {_keys(self.voters)}"
            )
        for k in sorted(self.added - seen, key=lambda k: k[0]):
            if k in self.voters:
                out.append(f"{key_text(k)} was added (the cluster said so) but is not a voter")
        for k in sorted(seen & self.wiped, key=lambda k: k[0]):
            out.append(f"{key_text(k)} is a voter, but its disk was wiped")
        for k in sorted(seen & self.removed, key=lambda k: k[0]):
            out.append(f"{key_text(k)} is a voter, but the cluster said it removed it")
        voter_ids = {i for i, _ in seen}
        for i in members:
            if i not in voter_ids:
                out.append(f"n{i} runs but is no voter (its addition never completed)")
        return out


def _keys(keys: set[Key]) -> str:
    return "{" + ", ".join(key_text(k) for k in sorted(keys, key=lambda k: k[0])) + "}"
