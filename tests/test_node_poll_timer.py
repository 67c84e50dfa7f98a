"""The timer for the core's next deadline (raftcore.node.poll_timer): one poll at the earliest
deadline the core asked for; a later deadline never delays an earlier one, and ``inf`` (nothing
to do) schedules nothing."""

from __future__ import annotations

import asyncio

import pytest

from raftcore.node.clock import now_ms
from raftcore.node.poll_timer import PollTimer

pytestmark = pytest.mark.timeout(30)


def test_the_earliest_deadline_wins_and_polls_once() -> None:
    async def main() -> None:
        polls: list[int] = []
        timer = PollTimer(asyncio.get_running_loop(), lambda: polls.append(now_ms()))
        start = now_ms()
        timer.schedule(start + 5_000)
        timer.schedule(start + 20)  # earlier: replaces the later one
        timer.schedule(start + 4_000)  # later than the one waited for: ignored
        timer.schedule(float("inf"))
        await asyncio.sleep(0.3)
        assert len(polls) == 1 and polls[0] >= start + 20

    asyncio.run(main())


def test_after_a_poll_a_later_deadline_is_scheduled_again_and_cancel_stops_it() -> None:
    async def main() -> None:
        polls: list[int] = []
        timer = PollTimer(asyncio.get_running_loop(), lambda: polls.append(1))
        timer.schedule(now_ms())
        await asyncio.sleep(0.05)
        assert polls == [1]
        timer.schedule(now_ms() + 30)  # the fired deadline no longer holds it back
        await asyncio.sleep(0.2)
        assert polls == [1, 1]
        timer.schedule(now_ms() + 30)
        timer.cancel()
        await asyncio.sleep(0.1)
        assert polls == [1, 1]

    asyncio.run(main())


def test_nothing_to_do_schedules_nothing() -> None:
    async def main() -> None:
        polls: list[int] = []
        timer = PollTimer(asyncio.get_running_loop(), lambda: polls.append(1))
        timer.schedule(float("inf"))
        await asyncio.sleep(0.05)
        assert polls == []

    asyncio.run(main())


def test_soon_polls_once_after_what_is_ready_now_however_many_ask() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        events: list[str] = []
        timer = PollTimer(loop, lambda: events.append("poll"))
        timer.schedule(now_ms() + 5_000)  # a far deadline does not hold it back
        for _ in range(10):
            timer.soon()
        loop.call_soon(events.append, "ready before")
        await asyncio.sleep(0.05)
        assert events == ["ready before", "poll"]

    asyncio.run(main())
