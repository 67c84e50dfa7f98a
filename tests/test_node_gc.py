"""The node process's garbage collector (raftcore.node.runner.tune_gc): what the node made while
starting is frozen, and the youngest generation is collected every GC_YOUNGEST allocations
instead of every 700, so that collections do not walk the requests in flight every few
requests. Checked in a process of its own: the settings are the whole interpreter's."""

from __future__ import annotations

import subprocess
import sys

from raftcore.node.runner import GC_YOUNGEST

PROBE = """
import gc
from raftcore.node.runner import tune_gc
before = gc.get_threshold()
tune_gc()
print(before[0], *gc.get_threshold(), gc.get_freeze_count())
"""


def test_a_started_node_freezes_what_it_made_and_collects_its_youngest_objects_less_often():
    out = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=60, check=True
    )
    default, youngest, middle, oldest, frozen = map(int, out.stdout.split())
    assert youngest == GC_YOUNGEST > 10 * default
    assert (middle, oldest) == (10, 10)  # the older generations' ratios as Python's
    assert frozen > 1_000  # the modules and objects of a started process
