"""The membership nemesis: an operator changing the voters (KIP-853) while the writers write and
the fault nemesis kills, pauses and partitions. One action at a time, every 1-3 s:

- ``replace``: a voter's disk dies. SIGKILL, its data directory moved aside, the node started
  again under its id with ``--bootstrap`` (an empty disk: a new directory id, an observer);
  then the old voter is removed by its directory id and the new replica added. Now and then
  the add is tried first (the cluster must refuse it: the id is a voter under the old key);
  the add is tried at once, before the new replica has caught up (the cluster must refuse,
  REQUEST_TIMED_OUT, and change nothing), then again once ``describe-quorum`` shows it
  caught up. The figures keep how long each replacement took, from the kill to the add;
- ``grow``: up to 5 voters, one new node (a new id, a place of its own on the network)
  started with ``--bootstrap`` and added at a time;
- ``shrink``: down to 3 voters, one removed at a time (the leader 40% of the time), each
  removed node stopped for good once the cluster said it was removed;
- ``transfer``: leadership handed to another available voter.

Each step goes through the operator's client functions (``raftcore.client.add_voter``,
``remove_voter``, ``transfer_leadership``), is retried until it succeeds, and is made only
when ``VoterGuard`` allows it. An answer other than success (a refusal, a timeout, no answer)
is resolved by reading the voter set from the leader of the newest epoch once no change is
pending: it must be the set before or the set after the change; anything else is a
``voter-set`` violation. The kind of each action is the one done least so far (a transfer
counts double), ties broken by the seed.

After the fault phase the action in progress is finished (bounded: ``membership-stuck``
otherwise), and the harness checks the voter set the settled cluster reports against what the
nemesis meant (``VoterGuard.violations``).
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable
from typing import Any

from raftcore.client import describe_quorum
from raftcore.client.voters import ChangeResult, add_voter, remove_voter, transfer_leadership
from raftcore.error_codes import error_name
from raftcore.security.config import ClientSecurity

from .nemesis import Event
from .nodes import NodeSet
from .probe import QuorumView
from .voter_guard import Key, VoterGuard, key_text

__all__ = ["MembershipNemesis"]

RPC_TIMEOUT_S = 10.0  # each change waits this long for its commit (the leader's timeout)
MIN_VOTERS, MAX_VOTERS = 3, 5

# What a refusal's words say, for the figures (the leader's messages, raftcore.raft.reconfig)
REASONS = (
    ("has not caught up", "not caught up"),
    ("does not fetch from the leader", "not fetching yet"),
    ("another voter change or transfer is in flight", "a change in flight"),
    ("is not committed yet", "the previous change not committed"),
    ("has not committed in its epoch", "the leader's epoch not committed"),
    ("was not committed in time", "not committed in time"),
    ("no answer from the leader in time", "no answer in time"),
    ("is already a voter", "the id is a voter"),
    ("not a voter", "not a voter"),
    ("won the election", "another voter won"),
    ("did not catch up in time", "target not caught up"),
    ("leads already", "the target leads already"),
)


class _OutOfTime(Exception):
    """The action did not finish within the time left after the fault phase."""


class _WrongVoters(Exception):
    """The cluster's voter set is neither the one before nor the one after a change."""


def _rule(why: str) -> str:
    """Which of VoterGuard's rules held a change or action back, in a few words."""
    for words, rule in (
        ("intact disks", "too few intact disks"),
        ("available", "too few voters available"),
        ("in flight", "a change in flight or unresolved"),
        ("down or paused", "the node is down or paused"),
    ):
        if words in why:
            return rule
    return why


def _reason(line: str) -> str:
    """A refusal's reason in a few words: a known one, else the leader's words after the error
    name (``what: ERROR_NAME: words``)."""
    for words, short in REASONS:
        if words in line:
            return short
    return line.split(":", 2)[-1].strip()


class MembershipNemesis(threading.Thread):
    def __init__(
        self,
        seed: int,
        nodes: NodeSet,
        guard: VoterGuard,
        *,
        security: ClientSecurity | None = None,
        log: Callable[[str], None] = print,
    ) -> None:
        super().__init__(name="membership-nemesis", daemon=True)
        self.rng = random.Random(seed * 1_000_003 + 853)  # a schedule of its own
        self.nodes = nodes
        self.guard = guard
        self.security = security
        self.log = log
        self.next_id = max(nodes.node_ids) + 1
        self.stopping = threading.Event()  # start no new action
        self.deadline: float | None = None  # finish the current one by then
        self.events: list[Event] = []
        self.done: Counter[str] = Counter()  # actions completed, by kind
        self.changes: Counter[str] = Counter()  # changes the cluster said it made, by kind
        self.refused: Counter[str] = Counter()  # refusals and failures, by error and reason
        self.held: Counter[str] = Counter()  # changes the nemesis held back, by rule
        self.late: int = 0  # changes not said to be made that the voter set showed were
        self.replacements: list[tuple[int, float]] = []  # (node, seconds from kill to add)
        self.sizes: list[int] = []  # the number of voters after each change
        self.errors: dict[str, list[str]] = {}  # violations
        self.crash: BaseException | None = None

    # ---- the harness's side -----------------------------------------------------------------

    def prepare(self, timeout_s: float = 30.0) -> None:
        """Wait until the voter set is in the log (kraft.version 1) with every voter's directory
        id, and hold it as the voters in force."""
        deadline = time.monotonic() + timeout_s
        while True:
            view = self._settled()
            if view is not None and view.kraft_version == 1 and None not in view.voters.values():
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"no kraft.version 1 within {timeout_s:g} s: {view}")
            time.sleep(0.2)
        with self.nodes.lock:
            self.guard.disks = {i: self.nodes.directory_id(i) for i in self.nodes.node_ids}
            self.guard.voters = set(view.voters.items())
        self.sizes.append(len(self.guard.voters))
        self._event("voters", sorted(view.voters), "kraft.version 1: " + self._keys())

    def stop_new(self) -> None:
        """Start no new action (and no further step of a grow or a shrink)."""
        self.stopping.set()

    def finish(self, timeout_s: float) -> None:
        """Give the action in progress ``timeout_s`` more to finish (a replacement always
        finishes: no wiped disk's key may stay a voter) and wait for the thread."""
        self.stopping.set()
        self.deadline = time.monotonic() + timeout_s
        self.join(timeout_s + RPC_TIMEOUT_S + 15)
        if self.is_alive():
            self._violation("membership-stuck", f"the nemesis did not end {timeout_s:g} s on")

    def run(self) -> None:
        try:
            while not self.stopping.wait(self.rng.uniform(1.0, 3.0)):
                kind = self._next_kind()
                if getattr(self, f"_{kind}")():
                    self.done[kind] += 1
        except _OutOfTime as exc:
            self._violation("membership-stuck", str(exc))
        except _WrongVoters as exc:
            self._violation("voter-set", str(exc))
        except BaseException as exc:  # reported by the harness, never silently lost
            self.crash = exc
            self._violation("membership-crashed", traceback.format_exc().rstrip())

    def summary(self) -> list[str]:
        made = ", ".join(f"{k} {n}" for k, n in sorted(self.changes.items())) or "none"
        acts = ", ".join(f"{k} {n}" for k, n in sorted(self.done.items())) or "none"
        refused = ", ".join(f"{k} {n}" for k, n in self.refused.most_common()) or "none"
        held = ", ".join(f"{k} {n}" for k, n in self.held.most_common()) or "none"
        took = ", ".join(f"n{i} {s:.1f} s" for i, s in self.replacements) or "none"
        sizes = " -> ".join(str(n) for n, _ in _runs(self.sizes)) or "?"
        return [
            f"  membership:     actions {acts}; changes made {made}; voters {sizes}",
            f"  refused:        {refused}"
            + (f"; {self.late} made though not said so" if self.late else ""),
            f"  held back:      {held}",
            f"  replacements:   {took}",
        ]

    def figures(self) -> dict[str, int]:
        return {
            "membership_changes": sum(self.changes.values()),
            "membership_refused": sum(self.refused.values()),
            "membership_held": sum(self.held.values()),
            "replacements": len(self.replacements),
        }

    # ---- the actions ----------------------------------------------------------------------------

    def _next_kind(self) -> str:
        n = len(self.guard.voters)
        kinds = ["replace", "transfer"]
        kinds += ["grow"] if n < MAX_VOTERS else []
        kinds += ["shrink"] if n > MIN_VOTERS else []
        cost = {k: self.done[k] * (2 if k == "transfer" else 1) for k in kinds}
        least = min(cost.values())
        return self.rng.choice([k for k in kinds if cost[k] == least])

    def _replace(self) -> bool:
        leader = self.nodes.probe(1.0).leader_id
        with self.nodes.lock:
            out = self.nodes.unavailable()
            mine = [i for i, _ in self.guard.available(self.guard.voters, out)]
            if not mine:
                return self._hold("replace", "no voter available")
            pick = self.rng.choice(sorted(mine))
            victim = leader if leader in mine and self.rng.random() < 1 / 3 else pick
            why = self.guard.why_not_wipe(victim, out)
            if why is not None:
                return self._hold("replace", why)
            old = self.guard.key_of(victim)
            assert old is not None
            started = time.monotonic()
            # a lost disk, or a lost quorum-state file alone: either way the old key forgot
            # its vote and must never vote again (a new directory id, an observer)
            fault = "lose-state" if self.rng.random() < 0.4 else "wipe"
            if fault == "wipe":
                self.nodes.wipe(victim)
            else:
                self.nodes.lose_state(victim)
            new = (victim, self.nodes.directory_id(victim))
            self.guard.disks[victim] = new[1]
            self.guard.wiped.add(old)
        if new == old:
            raise _WrongVoters(f"node {victim} kept its directory id after a {fault}")
        self._event(fault, [victim], f"{key_text(old)} -> {key_text(new)} (an observer)")
        if self.rng.random() < 0.3:  # the add before the remove: refused, the id is a voter
            self._change("add-voter", new, self.guard.voters | {new}, once=True)
        if not self._change("remove-voter", old, self.guard.voters - {old}):
            return False
        self._add(new)
        self.replacements.append((victim, time.monotonic() - started))
        return True

    def _grow(self) -> bool:
        while len(self.guard.voters) < MAX_VOTERS and not self.stopping.is_set():
            with self.nodes.lock:
                node_id = self.next_id
                self.next_id += 1
                self.nodes.add_node(node_id)
                new = (node_id, self.nodes.directory_id(node_id))
                self.guard.disks[node_id] = new[1]
            self._event("add-node", [node_id], f"{key_text(new)} joins (an observer)")
            self._add(new)
        return True

    def _shrink(self) -> bool:
        while len(self.guard.voters) > MIN_VOTERS and not self.stopping.is_set():
            leader = self.nodes.probe(1.0).leader_id
            with self.nodes.lock:
                ids = sorted(i for i, _ in self.guard.voters if i not in self.nodes.paused)
                victim = self.rng.choice(ids)
                if leader in ids and self.rng.random() < 0.4:
                    victim = leader
                old = self.guard.key_of(victim)
            assert old is not None
            if not self._change("remove-voter", old, self.guard.voters - {old}):
                return False
            with self.nodes.lock:
                if victim in self.nodes.node_ids:
                    status = self.nodes.retire(victim)
                    self._event("retire", [victim], f"stopped (exit status {status})")
        return True

    def _transfer(self) -> bool:
        view = self.nodes.probe(1.0)
        with self.nodes.lock:
            up = self.guard.available(self.guard.voters, self.nodes.unavailable())
            targets = sorted(i for i, _ in up if i != view.leader_id)
        if view.leader_id < 0 or not targets:
            return self._hold("transfer", "no leader, or no other voter available")
        target = self.rng.choice(targets)
        ev = self._event("transfer-leader", [target], f"from n{view.leader_id}")
        result = self._call(lambda: transfer_leadership(self._contacts(), target, **self._kw()))
        self._outcome(ev, result)
        if result.ok:
            self.changes["transfer"] += 1
        return result.ok

    # ---- the steps ------------------------------------------------------------------------------

    def _add(self, new: Key) -> None:
        """Add ``new``: at once (refused until it has caught up), then each time
        ``describe-quorum`` shows it caught up as an observer."""
        if self._change("add-voter", new, self.guard.voters | {new}, once=True):
            return
        while True:
            self._wait_caught_up(new)
            if self._change("add-voter", new, self.guard.voters | {new}, once=True):
                return

    def _change(self, kind: str, key: Key, new: set[Key], *, once: bool = False) -> bool:
        """Change the voters to ``new`` (adding or removing ``key``), retried until made
        (``once``: until one answer came). True when the voter set is ``new``."""
        node_id, directory = key
        held = ""
        while True:
            self._check_time()
            with self.nodes.lock:
                why = self.guard.why_not_change(new, self.nodes.unavailable())
                if why is None:
                    self.guard.begin(new)
            if why is not None and why[0] == "unsafe":  # never made: the action gives up
                self._hold(kind, f"{key_text(key)}: {why[1]}", node_id)
                time.sleep(1.0)
                return False
            if why is not None:
                if why[1] != held:  # counted once per stretch of one reason
                    held = why[1]
                    self._hold(kind, f"{key_text(key)}: {why[1]}", node_id)
                if self.guard.pending is not None:
                    self._resolve()
                time.sleep(0.3)
                continue
            ev = self._event(kind, [node_id], key_text(key))
            if kind == "add-voter":
                result = self._call(
                    lambda: add_voter(self._contacts(), node_id, directory, **self._kw())
                )
            else:
                result = self._call(
                    lambda: remove_voter(self._contacts(), node_id, directory, **self._kw())
                )
            self._outcome(ev, result)
            if result.ok:
                with self.nodes.lock:
                    if kind == "add-voter":
                        self.guard.done(added=key)
                    else:
                        self.guard.done(removed=key)
                self._made(kind)
                return True
            if self._resolve() == "after":
                self.late += 1
                with self.nodes.lock:
                    (self.guard.added if kind == "add-voter" else self.guard.removed).add(key)
                self._made(kind)
                return True
            if once:
                return False
            time.sleep(self.rng.uniform(0.3, 1.0))

    def _resolve(self) -> str:
        """Settle a change the cluster did not say it made: the voter set seen from the newest
        leader, no change pending, must be the one before or after (asked again for up to 5 s
        before it is called wrong)."""
        wrong_since = None
        while True:
            self._check_time()
            view = self._settled()
            if view is not None:
                seen = set(view.voters.items())
                with self.nodes.lock:
                    verdict = self.guard.resolve(seen)
                if verdict != "neither":
                    return verdict
                wrong_since = wrong_since or time.monotonic()
                if time.monotonic() - wrong_since > 5:
                    before, after = self.guard.voters, self.guard.pending
                    raise _WrongVoters(
                        f"the voters are {_show(seen)} (leader n{view.leader_id}, epoch "
                        f"{view.leader_epoch}), neither {_show(before)} before the change nor "
                        f"{_show(after or set())} after it"
                    )
            time.sleep(0.3)

    def _settled(self) -> QuorumView | None:
        """The quorum as the leader of the newest epoch any node knows describes it, when it
        has no change pending (None otherwise)."""
        view = self.nodes.probe(1.0)
        if view.leader_id < 0 or view.leader_epoch < view.max_epoch or view.pending_change:
            return None
        return view

    def _wait_caught_up(self, key: Key) -> None:
        """Until the leader lists ``key`` as an observer with no lag (bounded: 20 s)."""
        until = time.monotonic() + 20
        while time.monotonic() < until:
            self._check_time()
            try:
                info = self._call_raw(
                    lambda: describe_quorum(self._contacts(), timeout_s=3, security=self.security)
                )
            except Exception:
                info = None
            for r in [] if info is None else info.observers:
                if (r.replica_id, r.directory_id) == key and r.lag == 0 and r.last_caught_up_ms > 0:
                    return
            time.sleep(0.3)

    # ---- helpers --------------------------------------------------------------------------------

    def _kw(self) -> dict[str, Any]:
        return {"timeout_s": RPC_TIMEOUT_S, "security": self.security}

    def _contacts(self) -> list[str]:
        with self.nodes.lock:
            up = [i for i in self.nodes.node_ids if i not in self.nodes.unavailable()]
            return [self.nodes.endpoint(i) for i in up or self.nodes.node_ids]

    def _call_raw(self, make: Callable[[], Any]) -> Any:
        async def go() -> Any:
            return await asyncio.wait_for(make(), RPC_TIMEOUT_S + 15)

        return asyncio.run(go())

    def _call(self, make: Callable[[], Any]) -> ChangeResult:
        try:
            return self._call_raw(make)
        except Exception as exc:  # no answer in time, or none at all: an unknown outcome
            return ChangeResult(False, f"no answer from the leader in time: {exc!r}", -1)

    def _outcome(self, ev: Event, result: ChangeResult) -> None:
        ev.t_end = self.now()
        if not result.ok:
            name = error_name(result.error) if result.error >= 0 else "NO_ANSWER"
            self.refused[f"{name} ({_reason(result.line)})"] += 1
        self.log(f"[{ev.t_end:7.2f} s]   -> {result.line}")

    def _made(self, kind: str) -> None:
        self.changes[kind.removesuffix("-voter")] += 1
        self.sizes.append(len(self.guard.voters))

    def _hold(self, action: str, why: str, node_id: int | None = None) -> bool:
        """An action or change the nemesis does not make now, counted by rule."""
        self.held[f"{action}: {_rule(why)}"] += 1
        self._event("held-back", [] if node_id is None else [node_id], f"{action}: {why}")
        return False

    def _check_time(self) -> None:
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise _OutOfTime(
                f"the membership action in progress did not finish after the fault phase; "
                f"voters held {self._keys()}, pending {_show(self.guard.pending or set())}"
            )

    def _keys(self) -> str:
        return _show(self.guard.voters)

    def _violation(self, kind: str, detail: str) -> None:
        self.errors.setdefault(kind, []).append(detail)
        self.log(f"membership nemesis: {kind}: {detail}")

    def now(self) -> float:
        return time.monotonic() - self.nodes.t0

    def _event(self, kind: str, nodes: list[int], detail: str) -> Event:
        ev = Event(self.now(), kind, list(nodes), detail)
        self.events.append(ev)
        self.log(ev.line())
        return ev


def _show(keys: set[Key]) -> str:
    return "{" + ", ".join(key_text(k) for k in sorted(keys, key=lambda k: k[0])) + "}"


def _runs(sizes: list[int]) -> list[tuple[int, int]]:
    """[3, 3, 4, 5, 5] -> [(3, 2), (4, 1), (5, 2)]: the sizes the voter set went through."""
    out: list[tuple[int, int]] = []
    for n in sizes:
        if out and out[-1][0] == n:
            out[-1] = (n, out[-1][1] + 1)
        else:
            out.append((n, 1))
    return out
