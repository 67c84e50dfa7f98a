"""The segmented log against a plain in-memory model, over random sequences of appends (as
leader and follower), truncations, log-start moves, clean reopens and crashes (the process
dies without closing; a torn write may be left at the tail). After every step the log must
hold exactly the model's records, and its epoch answers must match a naive computation."""

import os
import shutil
import tempfile

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from raftcore.log import SegmentedLog
from raftcore.records import encode_batch, iter_batches

pytestmark = pytest.mark.slow  # the one test: a few seconds of random sequences

CONFIG = {"segment_bytes": 600, "index_interval_bytes": 64}


def naive_end_offset_for_epoch(entries, epoch, end):
    """Kafka's endOffsetFor over a plain list, plus the log's empty/above-all rule."""
    if not entries or epoch > entries[-1][0] or epoch == entries[-1][0]:
        return (entries[-1][0] if entries else 0, end)
    if epoch < entries[0][0]:
        return (epoch, entries[0][1])
    floor = max(i for i, (e, _) in enumerate(entries) if e <= epoch)
    return (entries[floor][0], entries[floor + 1][1])


class LogModel(RuleBasedStateMachine):
    @initialize()
    def setup(self):
        self.dir = tempfile.mkdtemp(prefix="raftcore-model-")
        self.log = SegmentedLog.open(self.dir, **CONFIG)
        self.records = []  # (offset, epoch, key, value)
        self.batch_of = {}  # offset -> base offset of its batch
        self.start = 0
        self.epoch = 1
        self.counter = 0

    def teardown(self):
        if hasattr(self, "log"):
            self.log.close()
            shutil.rmtree(self.dir, ignore_errors=True)

    @property
    def end(self):
        return self.records[-1][0] + 1 if self.records else self.start

    def _new_records(self, n):
        out = []
        for _ in range(n):
            self.counter += 1
            out.append((b"k%d" % self.counter, b"v%d-" % self.counter + b"x" * (self.counter % 40)))
        return out

    @rule(
        n=st.integers(1, 12),
        bump=st.booleans(),
        compression=st.sampled_from(["none", "none", "zstd", "gzip"]),
    )
    def append_as_leader(self, n, bump, compression):
        if bump:
            self.epoch += 1
        recs = self._new_records(n)
        first, last = self.log.append_as_leader(recs, self.epoch, compression=compression)
        assert (first, last) == (self.end, self.end + n - 1)
        self.records += [(first + i, self.epoch, k, v) for i, (k, v) in enumerate(recs)]
        self.batch_of.update({first + i: first for i in range(n)})

    @rule(sizes=st.lists(st.integers(1, 6), min_size=1, max_size=5), bump=st.booleans())
    def append_as_follower(self, sizes, bump):
        if bump:
            self.epoch += 1
        data = b""
        offset = self.end
        added = []
        for n in sizes:
            recs = self._new_records(n)
            data += encode_batch(recs, base_offset=offset, leader_epoch=self.epoch)
            added += [(offset + i, self.epoch, k, v) for i, (k, v) in enumerate(recs)]
            self.batch_of.update({offset + i: offset for i in range(n)})
            offset += n
        assert self.log.append_as_follower(data) == (self.end, offset - 1)
        self.records += added

    @rule(data=st.data())
    def truncate_to(self, data):
        target = data.draw(st.integers(self.start, self.end + 2))
        new_end = self.log.truncate_to(target)
        if target >= self.end:
            assert new_end == self.end
            return
        # whole batches go: the new end is the base of the batch holding `target` -- unless
        # that batch begins below the log start, which empties the log at `target`
        base = self.batch_of[target]
        if base < self.start:
            self.records, self.start = [], target
            assert new_end == target
        else:
            self.records = [r for r in self.records if r[0] < base]
            assert new_end == base
        assert new_end == self.end

    @rule(data=st.data())
    def set_log_start_offset(self, data):
        target = data.draw(st.integers(self.start, self.end))
        moved = self.log.set_log_start_offset(target)
        assert moved == (target > self.start)
        self.start = max(self.start, target)
        self.records = [r for r in self.records if r[0] >= self.start]

    @precondition(lambda self: self.end - self.start < 200)
    @rule(data=st.data())
    def truncate_fully_and_start_at(self, data):
        target = data.draw(st.integers(self.end, self.end + 50))
        self.log.truncate_fully_and_start_at(target)
        self.records = []
        self.start = target

    @rule()
    def flush(self):
        assert self.log.flush() == self.end

    @rule()
    def reopen(self):
        self.log.close()
        self.log = SegmentedLog.open(self.dir, **CONFIG)

    @rule(torn=st.binary(max_size=80))
    def crash(self, torn):
        """The process dies: nothing is closed or flushed (the page cache keeps the writes), and
        a torn write may trail the last segment."""
        log = self.log
        for seg in log._segments:
            seg.close_fd()
        log._release_directory_lock()
        log._closed = True
        if torn:
            last = sorted(f for f in os.listdir(self.dir) if f.endswith(".log"))[-1]
            with open(os.path.join(self.dir, last), "ab") as f:
                f.write(torn)
        self.log = SegmentedLog.open(self.dir, **CONFIG)

    @invariant()
    def log_holds_exactly_the_model(self):
        log = self.log
        assert log.log_start_offset == self.start
        assert log.end_offset == self.end
        got = []
        offset = self.start
        while offset < log.end_offset:
            view = log.read(offset, 256)
            assert len(view)
            for batch in iter_batches(view):
                batch.validate()
                for r in batch.records():
                    if r.offset >= offset:
                        got.append((r.offset, batch.partition_leader_epoch, r.key, r.value))
                offset = batch.next_offset
        assert got == self.records

    @invariant()
    def epoch_answers_match_a_naive_computation(self):
        entries = self.log.epoch_entries()
        # every epoch that has records starts at its first record (or at the log start)
        firsts = {}
        for offset, epoch, _, _ in self.records:
            firsts.setdefault(epoch, offset)
        assert [(e, s) for e, s in entries if e in firsts] == [
            (e, max(s, self.start)) for e, s in sorted(firsts.items())
        ] or not self.records
        for epoch in range(self.epoch + 2):
            assert tuple(self.log.end_offset_for_epoch(epoch)) == naive_end_offset_for_epoch(
                entries, epoch, self.end
            )


TestLogModel = LogModel.TestCase
TestLogModel.settings = settings(
    max_examples=int(os.environ.get("RAFTCORE_MODEL_EXAMPLES", "60")),
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
