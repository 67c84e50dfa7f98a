"""Progress of a Spark job as finished/total tasks, for the jobs' progress bar.

The jobs run their Spark actions in a job group of their own; a thread polls
``SparkContext.statusTracker()`` for the stages of that group's jobs and reports the tasks
finished and planned so far (the total grows while a job plans its next stages, as Spark's own
console bar does). The report is a ``(done, total)`` callable, such as
:class:`raftcore.logtools.Progress`.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from typing import Any

__all__ = ["TaskProgress"]


class TaskProgress:
    """``with TaskProgress(spark, "export", report):`` -- the Spark actions the block runs (on
    this thread) are reported to ``report(done, total)`` every ``interval_s`` and once at the
    end. With ``report=None`` it only names the job group."""

    def __init__(
        self,
        spark: Any,
        label: str,
        report: Callable[[int, int], None] | None,
        interval_s: float = 0.5,
    ) -> None:
        self.sc = spark.sparkContext
        self.group = f"raftcore-{label}-{uuid.uuid4().hex[:12]}"
        self.label = label
        self.report = report
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last = (-1, -1)

    def tasks(self) -> tuple[int, int]:
        """Tasks finished and planned in the group's stages so far."""
        tracker = self.sc.statusTracker()
        done = total = 0
        for job_id in tracker.getJobIdsForGroup(self.group):
            job = tracker.getJobInfo(job_id)
            if job is None:
                continue
            for stage_id in job.stageIds:
                stage = tracker.getStageInfo(stage_id)
                if stage is not None:
                    done += stage.numCompletedTasks
                    total += stage.numTasks
        return done, total

    def _poll(self) -> None:
        if self.report is None:
            return
        done, total = self.tasks()
        if (done, total) != self._last and total:
            self._last = (done, total)
            self.report(done, total)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._poll()

    def __enter__(self) -> TaskProgress:
        self.sc.setJobGroup(self.group, f"raftcore {self.label}", interruptOnCancel=True)
        if self.report is not None:
            self._thread = threading.Thread(
                target=self._run, name=f"{self.group}-progress", daemon=True
            )
            self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            if exc_info[0] is None:
                self._poll()  # the final count
        self.sc.setLocalProperty("spark.jobGroup.id", None)
        self.sc.setLocalProperty("spark.job.description", None)
