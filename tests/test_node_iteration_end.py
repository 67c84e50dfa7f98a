"""The end of a loop iteration (raftcore.node.iteration): what Produce's group append, the
embedded appends' group and the node's shared poll wait for runs in one loop hop, in the order
it was asked for, and one callback's failure does not keep the others from running."""

from __future__ import annotations

import asyncio

from raftcore.node.iteration import IterationEnd


def test_callbacks_of_one_iteration_run_together_in_one_hop_and_in_order():
    async def main() -> tuple[list[str], int]:
        loop = asyncio.get_running_loop()
        end = IterationEnd(loop)
        ran: list[str] = []
        hops = 0
        real_call_soon = loop.call_soon

        def counting_call_soon(*args, **kwargs):  # type: ignore[no-untyped-def]
            nonlocal hops
            hops += 1
            return real_call_soon(*args, **kwargs)

        loop.call_soon = counting_call_soon  # type: ignore[method-assign]
        try:
            for name in ("group", "poll", "embedded"):
                end.add(lambda name=name: ran.append(name))
            assert ran == []  # nothing before the loop has run what is ready now
            await asyncio.sleep(0)
        finally:
            loop.call_soon = real_call_soon  # type: ignore[method-assign]
        return ran, hops

    ran, hops = asyncio.run(main())
    assert ran == ["group", "poll", "embedded"]
    assert hops == 2  # the iteration's end, and the sleep's own wake-up


def test_a_failing_callback_does_not_keep_the_others_from_running(caplog):
    async def main() -> list[str]:
        end = IterationEnd(asyncio.get_running_loop())
        ran: list[str] = []

        def broken() -> None:
            raise RuntimeError("planted")

        end.add(broken)
        end.add(lambda: ran.append("after"))
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        return ran

    assert asyncio.run(main()) == ["after"]
    assert "planted" in caplog.text


def test_a_callback_added_at_the_end_of_an_iteration_waits_for_the_next():
    async def main() -> list[str]:
        end = IterationEnd(asyncio.get_running_loop())
        ran: list[str] = []

        def first() -> None:
            ran.append("first")
            end.add(lambda: ran.append("next"))

        end.add(first)
        await asyncio.sleep(0)
        assert ran == ["first"]
        await asyncio.sleep(0)
        return ran

    assert asyncio.run(main()) == ["first", "next"]
