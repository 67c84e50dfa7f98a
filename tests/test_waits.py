"""The suite's one wait (tests/waits.py): a condition polled until one deadline, and a
failure that names what was waited for and the last thing seen."""

from __future__ import annotations

import asyncio
import itertools

import pytest
from waits import WaitTimeout, until, wait_until


def test_a_wait_returns_the_conditions_first_truthy_value():
    counter = itertools.count()
    assert wait_until(lambda: next(counter) >= 3 and "ready", 5, "the third poll") == "ready"


def test_a_wait_that_times_out_names_what_it_waited_for_and_the_last_thing_seen():
    with pytest.raises(WaitTimeout) as failed:
        wait_until(lambda: False, 0.05, "node 3 to lead", last=lambda: "leader 1, epoch 4")
    assert str(failed.value) == (
        "timed out after 0.05 s waiting for node 3 to lead (last seen: 'leader 1, epoch 4')"
    )
    assert isinstance(failed.value, AssertionError)  # a failed test, not an error of the suite


def test_a_wait_must_name_its_condition():
    with pytest.raises(TypeError, match="say what is waited for"):
        wait_until(lambda: True, 1)
    with pytest.raises(TypeError, match="say what is waited for"):
        asyncio.run(until(lambda: True, 1))


def test_the_async_wait_awaits_a_coroutine_condition_and_lets_the_loop_run():
    async def main() -> str:
        done = asyncio.Event()
        asyncio.get_running_loop().call_later(0.05, done.set)

        async def answered() -> str | None:
            await asyncio.sleep(0)
            return "answered" if done.is_set() else None

        return await until(answered, 5, "the answer")

    assert asyncio.run(main()) == "answered"


def test_the_async_wait_times_out_with_the_same_message():
    with pytest.raises(WaitTimeout, match=r"^timed out after 0.05 s waiting for a leader$"):
        asyncio.run(until(lambda: None, 0.05, what="a leader"))
