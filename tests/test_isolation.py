"""Admission slots: how many are decided at once, how long others wait, and when they are refused."""

from __future__ import annotations

import asyncio

import pytest

from webhook.serve.isolation import BodyBudget, Busy, DecisionThreads, Slots


async def _outcome(slots: Slots, hold: float, order: list[str], name: str) -> str:
    try:
        await slots.acquire()
    except Busy:
        order.append(f"{name}:busy")
        return "busy"
    order.append(f"{name}:in")
    await asyncio.sleep(hold)
    slots.release()
    return "decided"


CASES = [
    pytest.param(2, 0, 1.0, 0.05, ["decided", "decided", "busy"], id="full-and-no-queue-refuses-at-once"),
    pytest.param(1, 2, 1.0, 0.05, ["decided", "decided", "decided"], id="queued-calls-get-the-slot-in-turn"),
    pytest.param(1, 1, 1.0, 0.05, ["decided", "decided", "busy"], id="past-the-queue-refused"),
    pytest.param(1, 2, 0.05, 0.5, ["decided", "busy", "busy"], id="a-wait-past-its-limit-is-refused"),
]


@pytest.mark.parametrize(("size", "queue", "wait", "hold", "expected"), CASES)
def test_slots_decide_queue_or_refuse(
    size: int, queue: int, wait: float, hold: float, expected: list[str]
) -> None:
    async def scenario() -> tuple[list[str], Slots]:
        slots = Slots(size, queue, wait)
        order: list[str] = []
        calls = []
        for i in range(3):
            calls.append(asyncio.create_task(_outcome(slots, hold, order, f"c{i}")))
            await asyncio.sleep(0)  # arrive in order
        return list(await asyncio.gather(*calls)), slots

    outcomes, slots = asyncio.run(scenario())
    assert outcomes == expected
    assert (slots.busy, slots.waiting) == (0, 0)  # every slot given back


def test_a_decision_error_reaches_the_caller() -> None:
    threads = DecisionThreads(1)

    def broken() -> int:
        raise RecursionError("deep")

    async def scenario() -> int:
        return await threads.submit(broken)

    with pytest.raises(RecursionError, match="deep"):
        asyncio.run(scenario())
    threads.shutdown()


BUDGETS = [
    pytest.param([100, 100], [], [100, 100], id="large-bodies-within-the-budget"),
    pytest.param([100, 100, 100], [], [100, 100, "busy"], id="past-the-budget-refused-after-its-wait"),
    pytest.param([100, 100, 100], [0], [100, 100, 100], id="past-the-budget-let-in-when-one-leaves"),
    pytest.param([500], [], [500], id="one-body-over-the-budget-still-received"),
    pytest.param([500, 100], [], [500, "busy"], id="none-beside-an-oversized-one"),
    pytest.param([200, 100, 10], [], [200, "busy", "busy"], id="arrivals-wait-in-turn"),
]


@pytest.mark.parametrize(("sizes", "leaving", "expected"), BUDGETS)
def test_body_budget_bounds_the_bytes_on_their_way(
    sizes: list[int], leaving: list[int], expected: list[int | str]
) -> None:
    """Bodies arrive in order; the ones in `leaving` (by index) end once every body has arrived."""

    async def scenario() -> tuple[list[int | str], BodyBudget]:
        budget = BodyBudget(limit=250, threshold=64)
        arrived = asyncio.Event()

        async def body(i: int, size: int) -> int | str:
            try:
                reserved = await budget.reserve(size, wait=0.2 if not leaving else 5.0)
            except Busy:
                return "busy"
            if i in leaving:
                await arrived.wait()
                budget.release(reserved)
            return reserved

        tasks = []
        for i, size in enumerate(sizes):
            tasks.append(asyncio.create_task(body(i, size)))
            await asyncio.sleep(0)  # arrive in order
        arrived.set()
        got = list(await asyncio.gather(*tasks))
        for i, reserved in enumerate(got):
            if isinstance(reserved, int) and i not in leaving:
                budget.release(reserved)
        return got, budget

    got, budget = asyncio.run(scenario())
    assert got == expected
    assert (budget.reserved, budget.waiting) == (0, 0)  # every byte given back
