"""Issue 42 item 6: a `Delivery` behaves as an asyncio.Future in every asyncio function that takes one.

Each scenario runs three times over: on Deliveries from a real BatchingProducer (mock cluster), on
plain asyncio.Futures standing in for them, and both under the C Task and the pure-Python Task
(whose code paths differ). Every run must give the scenario's expected outcome, written out in the
table: the Future runs prove the table is asyncio's own behaviour, the Delivery runs that a
Delivery matches it. Nothing is resolved by time: the producer lingers 900 s, so a message is acked
only when the scenario calls `resolve()` (a flush); the only timeouts are ones that must expire.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from rebalancer.produce import BatchingProducer
from rebalancer.testing import MockKafkaCluster

pytestmark = pytest.mark.kafka


class Source:
    """What a scenario needs: `send()` a pending future-like, `resolve()` every one sent so far."""

    async def send(self) -> Any:
        raise NotImplementedError

    async def resolve(self) -> None:
        raise NotImplementedError


class FutureSource(Source):
    """asyncio.Futures that resolve as the producer's messages would: (partition 0, offset in order)."""

    def __init__(self) -> None:
        self.sent: list[asyncio.Future] = []

    async def send(self) -> asyncio.Future:
        future = asyncio.get_running_loop().create_future()
        self.sent.append(future)
        return future

    async def resolve(self) -> None:
        for offset, future in enumerate(self.sent):
            if not future.done():
                future.set_result((0, offset))
        await asyncio.sleep(0)  # their callbacks run, as they have once a flush returns


class ProducerSource(Source):
    def __init__(self, producer: BatchingProducer, topic: str) -> None:
        self.producer, self.topic = producer, topic

    async def send(self) -> Any:
        return await self.producer.send(self.topic, b"v", partition=0)

    async def resolve(self) -> None:
        await self.producer.flush()


def cancelled_error(*message: str) -> tuple[str, tuple[object, ...]]:
    return ("CancelledError", message)


def shape(value: object) -> object:
    """An outcome as plain data: exceptions by type name and args, containers element-wise."""
    if isinstance(value, BaseException):
        inner = [shape(e) for e in value.exceptions] if isinstance(value, BaseExceptionGroup) else None
        return (type(value).__name__, inner if inner is not None else value.args)
    if isinstance(value, list):
        return [shape(v) for v in value]
    return value


async def outcome(awaitable: Awaitable[object]) -> object:
    try:
        return ("returns", shape(await awaitable))
    except BaseException as exc:
        return ("raises", shape(exc))


def status(future: Any) -> object:
    if future.cancelled():
        return "cancelled"
    if not future.done():
        return "pending"
    return shape(future.exception()) if future.exception() is not None else future.result()


# -- the scenarios -------------------------------------------------------------------------------
# Each returns plain data; the table below gives what it must be.
async def gather_results(src: Source) -> object:
    a, b = await src.send(), await src.send()
    gathered = asyncio.ensure_future(asyncio.gather(a, b))
    await src.resolve()
    return await outcome(gathered)


async def gather_return_exceptions_over_a_cancelled_one(src: Source) -> object:
    # The reproducer: this never returned, and wait_for could not break it.
    a, b = await src.send(), await src.send()
    a.cancel()
    gathered = asyncio.ensure_future(asyncio.wait_for(asyncio.gather(a, b, return_exceptions=True), 60))
    await src.resolve()
    return await outcome(gathered)


async def gather_return_exceptions_keeps_the_cancel_message(src: Source) -> object:
    a, b = await src.send(), await src.send()
    gathered = asyncio.ensure_future(asyncio.gather(a, b, return_exceptions=True))
    await asyncio.sleep(0)
    a.cancel("not needed")
    await src.resolve()
    return await outcome(gathered)


async def gather_raises_a_childs_cancellation(src: Source) -> object:
    a, b = await src.send(), await src.send()
    gathered = asyncio.ensure_future(asyncio.gather(a, b))
    await asyncio.sleep(0)
    a.cancel()
    result = await outcome(gathered)
    await src.resolve()
    return result, status(a), status(b)  # the sibling is not cancelled; it is delivered


async def gather_cancelled_from_outside(src: Source, return_exceptions: bool) -> object:
    a, b = await src.send(), await src.send()
    gathered = asyncio.gather(a, b, return_exceptions=return_exceptions)
    await asyncio.sleep(0)
    assert gathered.cancel()
    result = await outcome(gathered)
    await src.resolve()
    return result, status(a), status(b)


async def gather_cancelled_after_its_last_child_resolved(src: Source) -> object:
    # gather asks its last child for the CancelledError even when that child was not cancelled.
    first = await src.send()
    await src.resolve()
    second = await src.send()
    gathered = asyncio.gather(second, first, return_exceptions=True)
    await asyncio.sleep(0)
    assert gathered.cancel()
    result = await outcome(asyncio.wait_for(gathered, 60))
    await src.resolve()
    return result, status(second), status(first)


async def wait_all_and_first_completed(src: Source) -> object:
    a, b = await src.send(), await src.send()
    first = asyncio.ensure_future(asyncio.wait([a, b], return_when=asyncio.FIRST_COMPLETED))
    await asyncio.sleep(0)
    a.cancel()
    done, pending = await first
    first_seen = (sorted(status(f) for f in done), sorted(status(f) for f in pending))
    everything = asyncio.ensure_future(asyncio.wait([a, b]))
    await src.resolve()
    done, pending = await everything
    return first_seen, sorted(map(str, (status(f) for f in done))), len(pending)


async def wait_cancelled_from_outside(src: Source) -> object:
    a, b = await src.send(), await src.send()
    waiting = asyncio.ensure_future(asyncio.wait([a, b]))
    await asyncio.sleep(0)
    waiting.cancel()
    result = await outcome(waiting)
    await src.resolve()
    return result, status(a), status(b)  # wait never cancels what it waits for


async def wait_for_result(src: Source) -> object:
    a = await src.send()
    waiting = asyncio.ensure_future(asyncio.wait_for(a, 60))
    await asyncio.sleep(0)
    await src.resolve()
    return await outcome(waiting)


async def wait_for_times_out(src: Source, timeout: float) -> object:
    a = await src.send()
    result = await outcome(asyncio.wait_for(a, timeout))  # nothing resolves it: the timeout must expire
    await src.resolve()
    return result, status(a)


async def wait_for_cancelled(src: Source, side: str) -> object:
    a = await src.send()
    waiting = asyncio.ensure_future(asyncio.wait_for(a, 60))
    await asyncio.sleep(0)
    (a if side == "inside" else waiting).cancel()
    return await outcome(waiting), status(a)


async def shield_result(src: Source) -> object:
    a = await src.send()
    shielded = asyncio.shield(a)
    await src.resolve()
    return await outcome(shielded)


async def shield_cancelled_from_outside(src: Source) -> object:
    a = await src.send()
    shielded = asyncio.shield(a)
    shielded.cancel()
    result = await outcome(shielded)
    await src.resolve()
    return result, status(a)  # the shielded message is delivered


async def shield_cancelled_from_inside(src: Source) -> object:
    a = await src.send()
    shielded = asyncio.shield(a)
    a.cancel()
    return await outcome(shielded), status(a)


async def as_completed_in_completion_order(src: Source) -> object:
    a, b = await src.send(), await src.send()
    results = []
    for i, next_done in enumerate(asyncio.as_completed([a, b])):
        if i == 0:
            b.cancel()  # b completes first, by cancellation; a when resolved
            results.append(await outcome(next_done))
            await src.resolve()
        else:
            results.append(await outcome(next_done))
    return results


async def as_completed_times_out(src: Source) -> object:
    a = await src.send()
    (only,) = list(asyncio.as_completed([a], timeout=0.01))
    result = await outcome(only)
    await src.resolve()
    return result, status(a)  # as_completed does not cancel on its timeout


async def ensure_future_returns_it(src: Source) -> object:
    a = await src.send()
    same = asyncio.ensure_future(a) is a and asyncio.isfuture(a)
    await src.resolve()
    return same, await outcome(asyncio.ensure_future(a))


async def _await(future: Any) -> object:
    return await future


async def task_cancelled_from_inside(src: Source) -> object:
    a = await src.send()
    task = asyncio.ensure_future(_await(a))
    await asyncio.sleep(0)
    a.cancel("from inside")
    return await outcome(task), task.cancelled(), status(a)


async def task_cancelled_from_outside(src: Source) -> object:
    a = await src.send()
    task = asyncio.ensure_future(_await(a))
    await asyncio.sleep(0)
    task.cancel()
    result = await outcome(task)
    await src.resolve()
    return result, task.cancelled(), status(a)


async def task_group_results(src: Source) -> object:
    a, b = await src.send(), await src.send()
    async with asyncio.TaskGroup() as group:
        tasks = [group.create_task(_await(a)), group.create_task(_await(b))]
        await asyncio.sleep(0)
        await src.resolve()
    return [t.result() for t in tasks]


async def task_group_cancels_its_waiters(src: Source) -> object:
    a, b = await src.send(), await src.send()

    async def fail() -> None:
        await asyncio.sleep(0)
        raise ValueError("one task failed")

    async def run() -> None:
        async with asyncio.TaskGroup() as group:
            group.create_task(_await(a))
            group.create_task(_await(b))
            group.create_task(fail())

    result = await outcome(run())
    await src.resolve()
    return result, status(a), status(b)


async def timeout_context_cancels_it(src: Source) -> object:
    a = await src.send()

    async def run() -> object:
        async with asyncio.timeout(0):
            return await a

    result = await outcome(run())
    await src.resolve()
    return result, status(a)


RAISES_CANCELLED = ("raises", cancelled_error())
SCENARIOS: list[tuple[str, Callable[[Source], Awaitable[object]], object]] = [
    ("gather", gather_results, ("returns", [(0, 0), (0, 1)])),
    (
        "gather(return_exceptions=True), the Delivery cancelled",
        gather_return_exceptions_over_a_cancelled_one,
        ("returns", [cancelled_error(""), (0, 1)]),
    ),
    (
        "gather(return_exceptions=True), cancel('msg')",
        gather_return_exceptions_keeps_the_cancel_message,
        ("returns", [cancelled_error("not needed"), (0, 1)]),
    ),
    ("gather, the Delivery cancelled", gather_raises_a_childs_cancellation, (RAISES_CANCELLED, "cancelled", (0, 1))),
    (
        "gather cancelled",
        lambda src: gather_cancelled_from_outside(src, False),
        (RAISES_CANCELLED, "cancelled", "cancelled"),
    ),
    (
        "gather(return_exceptions=True) cancelled",
        lambda src: gather_cancelled_from_outside(src, True),
        (RAISES_CANCELLED, "cancelled", "cancelled"),
    ),
    (
        "gather cancelled, its last child resolved",
        gather_cancelled_after_its_last_child_resolved,
        (RAISES_CANCELLED, "cancelled", (0, 0)),
    ),
    (
        "wait FIRST_COMPLETED then ALL_COMPLETED",
        wait_all_and_first_completed,
        ((["cancelled"], ["pending"]), ["(0, 1)", "cancelled"], 0),
    ),
    ("wait cancelled", wait_cancelled_from_outside, (RAISES_CANCELLED, (0, 0), (0, 1))),
    ("wait_for", wait_for_result, ("returns", (0, 0))),
    ("wait_for times out", lambda src: wait_for_times_out(src, 0.01), (("raises", ("TimeoutError", ())), "cancelled")),
    ("wait_for(timeout=0)", lambda src: wait_for_times_out(src, 0), (("raises", ("TimeoutError", ())), "cancelled")),
    ("wait_for, the Delivery cancelled", lambda src: wait_for_cancelled(src, "inside"), (RAISES_CANCELLED, "cancelled")),
    ("wait_for cancelled", lambda src: wait_for_cancelled(src, "outside"), (RAISES_CANCELLED, "cancelled")),
    ("shield", shield_result, ("returns", (0, 0))),
    ("shield cancelled", shield_cancelled_from_outside, (RAISES_CANCELLED, (0, 0))),
    ("shield, the Delivery cancelled", shield_cancelled_from_inside, (RAISES_CANCELLED, "cancelled")),
    ("as_completed", as_completed_in_completion_order, [RAISES_CANCELLED, ("returns", (0, 0))]),
    ("as_completed times out", as_completed_times_out, (("raises", ("TimeoutError", ())), (0, 0))),
    ("ensure_future", ensure_future_returns_it, (True, ("returns", (0, 0)))),
    (
        "a Task awaiting it, the Delivery cancelled",
        task_cancelled_from_inside,
        (("raises", cancelled_error("from inside")), True, "cancelled"),
    ),
    ("a Task awaiting it cancelled", task_cancelled_from_outside, (RAISES_CANCELLED, True, "cancelled")),
    ("TaskGroup", task_group_results, [(0, 0), (0, 1)]),
    (
        "TaskGroup cancels its waiters",
        task_group_cancels_its_waiters,
        (("raises", ("ExceptionGroup", [("ValueError", ("one task failed",))])), "cancelled", "cancelled"),
    ),
    ("asyncio.timeout", timeout_context_cancels_it, (("raises", ("TimeoutError", ())), "cancelled")),
]

_topics = itertools.count()


def py_task_factory(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Task:
    return asyncio.tasks._PyTask(coro, loop=loop, **kwargs)  # type: ignore[attr-defined]


def run_scenario(
    scenario: Callable[[Source], Awaitable[object]], task: str, cluster: MockKafkaCluster | None
) -> object:
    async def main() -> object:
        loop = asyncio.get_running_loop()
        if task == "python":
            loop.set_task_factory(py_task_factory)
        errors: list[dict[str, Any]] = []
        loop.set_exception_handler(lambda _loop, context: errors.append(context))
        if cluster is None:
            result = await loop.create_task(scenario(FutureSource()))
        else:
            topic = f"delivery-asyncio-{next(_topics)}"
            cluster.create_topic(topic, partitions=1)
            # 900 s (librdkafka's maximum linger): nothing is sent until resolve() flushes.
            async with BatchingProducer(
                {"bootstrap.servers": cluster.bootstrap_servers, "broker.linger.ms": 900_000}
            ) as producer:
                result = await loop.create_task(scenario(ProducerSource(producer, topic)))
        # A callback that raised (the AttributeError) is logged by the loop, not raised.
        assert [str(e.get("exception") or e.get("message")) for e in errors] == []
        return result

    return asyncio.run(asyncio.wait_for(main(), 120))


@pytest.mark.parametrize("task", ["c", "python"])
@pytest.mark.parametrize("kind", ["future", "delivery"])
@pytest.mark.parametrize(("name", "scenario", "expected"), SCENARIOS, ids=[s[0] for s in SCENARIOS])
def test_a_delivery_behaves_as_an_asyncio_future(
    kafka_mock_cluster: MockKafkaCluster, name: str, scenario: Any, expected: object, kind: str, task: str
) -> None:
    cluster = kafka_mock_cluster if kind == "delivery" else None
    assert run_scenario(scenario, task, cluster) == expected
