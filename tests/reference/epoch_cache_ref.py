"""A naive leader-epoch cache: a Python list and linear scans, written from Kafka's
LeaderEpochFileCache rules, for differential tests of the native cache."""


class NaiveEpochCache:
    def __init__(self):
        self.entries = []  # (epoch, start offset), both increasing

    def assign(self, epoch, start):
        if epoch < 0 or start < 0:
            raise ValueError("negative")
        if self.entries and self.entries[-1][0] == epoch and start >= self.entries[-1][1]:
            return False
        self.entries = [(e, s) for e, s in self.entries if e < epoch and s < start]
        self.entries.append((epoch, start))
        return True

    def end_offset_for(self, epoch, log_end):
        if epoch == -1 or not self.entries:
            return (-1, -1)
        if self.entries[-1][0] == epoch:
            return (epoch, log_end)
        higher = [(e, s) for e, s in self.entries if e > epoch]
        if not higher:
            return (-1, -1)
        lower = [(e, s) for e, s in self.entries if e <= epoch]
        if not lower:
            return (epoch, higher[0][1])
        return (lower[-1][0], higher[0][1])

    def epoch_for_offset(self, offset):
        found = -1
        for e, s in self.entries:
            if s <= offset:
                found = e
        return found

    def truncate_from_end(self, end):
        if end < 0 or not self.entries or self.entries[-1][1] < end:
            return False
        self.entries = [(e, s) for e, s in self.entries if s < end]
        return True

    def truncate_from_start(self, start):
        removed = [(e, s) for e, s in self.entries if s <= start]
        if not removed:
            return False
        before = list(self.entries)
        self.entries = [(removed[-1][0], start)] + [(e, s) for e, s in self.entries if s > start]
        return self.entries != before
