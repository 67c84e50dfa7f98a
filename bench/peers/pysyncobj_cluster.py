"""Three PySyncObj node processes on loopback (``pysyncobj_node.py``), for the benchmarks
that compare raftcore with PySyncObj: the workload runs inside the leader's process, one
JSON line per command on its stdin (see that file)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from raftcore.node.local_cluster import free_ports

__all__ = ["PySyncObjCluster"]

PEER = Path(__file__).parent / "pysyncobj_node.py"


class PySyncObjCluster:
    """``period_s``: appendEntriesPeriod, with PySyncObj's batching and 1 ms ticks (1 ms is
    its best); None: PySyncObj's default settings (0.1 s appends, 50 ms ticks)."""

    def __init__(self, period_s: float | None = 0.001) -> None:
        addrs = [f"127.0.0.1:{p}" for p in free_ports(3)]
        self.procs = [
            subprocess.Popen(
                [
                    sys.executable,
                    str(PEER),
                    a,
                    ",".join(x for x in addrs if x != a),
                    "default" if period_s is None else str(period_s),
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            )
            for a in addrs
        ]

    def ask(self, proc: subprocess.Popen, msg: dict) -> dict:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(json.dumps(msg) + "\n")
        proc.stdin.flush()
        return json.loads(proc.stdout.readline())

    def leader(self, timeout_s: float = 30) -> subprocess.Popen:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for proc in self.procs:
                status = self.ask(proc, {"cmd": "status"})
                if status["leader"] and status["ready"]:
                    return proc
            time.sleep(0.05)
        raise TimeoutError("PySyncObj elected no leader")

    def close(self) -> None:
        for proc in self.procs:
            proc.kill()
            proc.wait(10)
