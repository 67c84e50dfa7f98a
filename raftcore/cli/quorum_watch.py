"""``raftcore describe-quorum --watch``: the DescribeQuorum table, asked again every interval,
until Ctrl-C.

On a terminal the screen is redrawn in place (as ``watch(1)`` does); otherwise -- a pipe, a
file, a test -- each table is printed after the previous one, with a blank line between, so a
log of the quorum over time can be kept. A round that gets no answer (no leader right now,
during an election) prints why and the next round tries again; a topic or partition the
cluster does not have ends the watch at once (exit status 1).

Ctrl-C sets an event the loop waits on, rather than cancelling the task: Python 3.11's
``asyncio.wait_for`` can swallow a cancellation that comes as its inner call ends, and a
watch that missed its Ctrl-C so would have run on (CI saw one go past 15 s).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
import time
from typing import Any, TextIO

from raftcore.client.admin import describe_quorum_with, format_quorum
from raftcore.client.cluster import ClusterClient, UnknownTopicError
from raftcore.errors import RaftcoreError

__all__ = ["run_watch", "watch_quorum"]

CLEAR = "\x1b[H\x1b[2J"  # cursor home, clear the screen


async def watch_quorum(
    bootstrap: list[str],
    out: TextIO,
    *,
    topic: str = "raftcore",
    partition: int = 0,
    interval_s: float = 1.0,
    timeout_s: float = 10.0,
    rounds: int | None = None,
    security: Any = None,
    stop: asyncio.Event | None = None,
) -> None:
    """Print the quorum's table every ``interval_s`` seconds (``rounds`` times, or until
    ``stop`` is set, or cancelled). Each table starts with a line naming the time it was
    asked."""
    stop = stop or asyncio.Event()
    tty = out.isatty()
    cluster = ClusterClient(
        bootstrap,
        topic=topic,
        partition=partition,
        request_timeout_ms=int(timeout_s * 1000),
        security=security,
    )
    done = 0
    try:
        while (rounds is None or done < rounds) and not stop.is_set():
            started = time.monotonic()
            asked = asyncio.ensure_future(
                describe_quorum_with(cluster, topic=topic, timeout_s=timeout_s)
            )
            stopped = asyncio.ensure_future(stop.wait())
            await asyncio.wait({asked, stopped}, return_when=asyncio.FIRST_COMPLETED)
            stopped.cancel()
            if stop.is_set():
                asked.cancel()
                break
            try:
                table = format_quorum(asked.result())
            except UnknownTopicError:
                raise  # no such topic or partition: asking again will not make one
            except (RaftcoreError, OSError, asyncio.TimeoutError) as exc:
                table = f"no answer: {exc}"
            stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime())
            header = f"Every {interval_s:g}s: describe-quorum --bootstrap {','.join(bootstrap)}"
            if partition:
                header += f" --partition {partition}"
            if tty:
                out.write(f"{CLEAR}{header}    {stamp}\n\n{table}\n")
            else:
                out.write(f"{'' if done == 0 else chr(10)}{header}    {stamp}\n{table}\n")
            out.flush()
            done += 1
            if rounds is None or done < rounds:
                with contextlib.suppress(asyncio.TimeoutError):
                    left = max(0.0, interval_s - (time.monotonic() - started))
                    await asyncio.wait_for(stop.wait(), left)
    finally:
        # Ctrl-C: the connections are let go within a second, answered or not.
        with contextlib.suppress(Exception, asyncio.CancelledError):
            await asyncio.wait_for(cluster.close(), 1.0)


def run_watch(bootstrap: list[str], out: TextIO, **options: Any) -> int:
    """Watch until Ctrl-C, which ends it quietly (exit status 0). A topic or partition the
    cluster does not have ends it at once with one line on stderr (exit status 1)."""

    async def main() -> None:
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGINT, stop.set)
        await watch_quorum(bootstrap, out, stop=stop, **options)

    try:
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(main())
    except UnknownTopicError as exc:
        print(f"raftcore describe-quorum: {exc}", file=sys.stderr)
        return 1
    return 0
