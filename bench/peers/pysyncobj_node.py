"""One PySyncObj node, as a process, for the cluster benchmark (the peer raftcore is compared
with). PySyncObj has no client protocol: the workload runs inside a node, so every node reads
commands on stdin and answers on stdout, one JSON line each:

    {"cmd": "status"}                    -> {"leader": bool, "ready": bool}
    {"cmd": "run", "records": N, "batch": B, "size": S, "in_flight": K}
                                         -> {"seconds": t, "latencies_ms": [...]}

The replicated state machine counts records and bytes (raftcore's node stores the records;
PySyncObj keeps its log in memory, without fsync, unless given a journal file). A batch of B
records of S bytes is one command, which is PySyncObj's best batched mode: one log entry per
batch, appendEntriesUseBatch, large send/receive buffers and batch sizes.
"""

from __future__ import annotations

import json
import sys
import threading
import time

from pysyncobj import SyncObj, SyncObjConf, replicated


class Counter(SyncObj):
    def __init__(self, self_addr: str, partners: list[str], conf: SyncObjConf) -> None:
        super().__init__(self_addr, partners, conf)
        self.records = 0
        self.bytes = 0

    @replicated
    def append(self, batch: list[bytes]) -> int:
        self.records += len(batch)
        self.bytes += sum(len(r) for r in batch)
        return self.records


def run(node: Counter, records: int, batch: int, size: int, in_flight: int) -> dict:
    slots = threading.Semaphore(in_flight)
    done = threading.Event()
    lock = threading.Lock()
    latencies: list[float] = []
    errors: list[str] = []
    remaining = [records]
    payload = [bytes([n % 251]) * size for n in range(batch)]

    def callback(sent: float, count: int):  # type: ignore[no-untyped-def]
        def cb(result, error):  # type: ignore[no-untyped-def]
            with lock:
                if error != 0:  # pysyncobj.FAIL_REASON.SUCCESS == 0
                    errors.append(str(error))
                latencies.append((time.perf_counter() - sent) * 1000)
                remaining[0] -= count
                if remaining[0] <= 0:
                    done.set()
            slots.release()

        return cb

    started = time.perf_counter()
    sent_records = 0
    while sent_records < records:
        count = min(batch, records - sent_records)
        slots.acquire()
        now = time.perf_counter()
        node.append(payload[:count], callback=callback(now, count))
        sent_records += count
    done.wait(600)
    seconds = time.perf_counter() - started
    return {"seconds": seconds, "latencies_ms": latencies, "errors": errors[:5]}


def main() -> int:
    self_addr, partners = sys.argv[1], sys.argv[2].split(",")
    period = sys.argv[3] if len(sys.argv) > 3 else "0.1"
    # never compacting during a run, a queue that takes every command in flight, fixed members
    common = {
        "commandsQueueSize": 1_000_000,
        "logCompactionMinEntries": 1 << 30,
        "logCompactionMinTime": 1 << 30,
        "dynamicMembershipChange": False,
    }
    if period == "default":  # PySyncObj's own timing and batching
        conf = SyncObjConf(**common)
    else:  # its best: batched appends, large buffers, ticks and appends every ``period`` s
        conf = SyncObjConf(
            appendEntriesUseBatch=True,
            appendEntriesBatchSizeBytes=4 << 20,
            sendBufferSize=4 << 20,
            recvBufferSize=4 << 20,
            autoTickPeriod=0.001,
            appendEntriesPeriod=float(period),
            **common,
        )
    node = Counter(self_addr, partners, conf)
    for line in sys.stdin:
        msg = json.loads(line)
        if msg["cmd"] == "status":
            status = node.getStatus()
            reply = {"leader": status.get("state") == 2, "ready": node.isReady()}
        elif msg["cmd"] == "run":
            reply = run(node, msg["records"], msg["batch"], msg["size"], msg["in_flight"])
        else:
            reply = {"error": f"unknown command {msg['cmd']}"}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
