"""`Delivery`, what send() returns: it must behave as the asyncio.Future it replaces.

Awaiting, done/result/exception, done callbacks (exactly once, in order, with the Delivery as
argument), cancellation, and asyncio's own helpers (wait, gather, wait_for, shield), all without
a cluster: a Delivery reads its batch's one future.
"""

from __future__ import annotations

import asyncio
import contextvars

import pytest
from aiokafka.errors import KafkaError, KafkaTimeoutError

from rebalancer.produce.delivery import Delivery


class FakeBatch:
    def __init__(self, loop: asyncio.AbstractEventLoop, partition: int = 4) -> None:
        self.future = loop.create_future()
        self.partition = partition


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, timeout=30))


def test_results_offsets_and_awaiting():
    async def main():
        batch = FakeBatch(asyncio.get_running_loop())
        deliveries = [Delivery(batch, i) for i in range(3)]
        assert asyncio.isfuture(deliveries[0]) and not any(d.done() for d in deliveries)
        with pytest.raises(asyncio.InvalidStateError):
            deliveries[0].result()
        with pytest.raises(asyncio.InvalidStateError):
            deliveries[0].exception()
        waiter = asyncio.ensure_future(asyncio.gather(*deliveries))
        await asyncio.sleep(0)
        assert not waiter.done()
        batch.future.set_result(40)
        assert await waiter == [(4, 40), (4, 41), (4, 42)]
        assert await deliveries[2] == (4, 42) and deliveries[1].exception() is None
        assert "finished" in repr(deliveries[0]) and deliveries[0].get_loop() is asyncio.get_running_loop()

    run(main())


def test_acks_zero_resolves_to_offset_minus_one():
    async def main():
        batch = FakeBatch(asyncio.get_running_loop(), partition=0)
        delivery = Delivery(batch, 5)
        batch.future.set_result(None)
        assert await delivery == (0, -1)

    run(main())


def test_each_message_raises_its_own_copy_of_the_batch_error():
    async def main():
        batch = FakeBatch(asyncio.get_running_loop())
        deliveries = [Delivery(batch, i) for i in range(3)]
        error = KafkaError("down")
        batch.future.set_exception(error)
        errors = [d.exception() for d in deliveries]
        assert all(type(e) is KafkaError and e.args == ("down",) and e is not error for e in errors)
        assert len({id(e) for e in errors}) == 3
        assert deliveries[0].exception() is errors[0]  # the same copy each time it is asked
        with pytest.raises(KafkaError) as raised:
            await deliveries[1]
        assert raised.value is errors[1]
        with pytest.raises(KafkaError):
            deliveries[2].result()

    run(main())


def test_callbacks_run_once_in_order_with_the_delivery_and_their_context():
    var = contextvars.ContextVar("var", default="none")

    async def main():
        loop = asyncio.get_running_loop()
        batch = FakeBatch(loop)
        first, second = Delivery(batch, 0), Delivery(batch, 1)
        calls: list[tuple[str, Delivery, str]] = []
        first.add_done_callback(lambda d: calls.append(("a", d, var.get())))
        context = contextvars.copy_context()
        context.run(var.set, "mine")
        second.add_done_callback(lambda d: calls.append(("b", d, var.get())), context=context)
        first.add_done_callback(lambda d: calls.append(("c", d, var.get())))

        def dropped(d: Delivery) -> None:  # removed before the ack: never runs
            calls.append(("dropped", d, ""))

        first.add_done_callback(dropped)
        assert first.remove_done_callback(dropped) == 1 and first.remove_done_callback(dropped) == 0
        batch.future.set_result(7)
        await asyncio.sleep(0)
        assert calls == [("a", first, "none"), ("b", second, "mine"), ("c", first, "none")]
        for _ in range(3):
            await asyncio.sleep(0)
        assert len(calls) == 3  # exactly once
        first.add_done_callback(lambda d: calls.append(("late", d, "")))  # after the ack: soon, once
        await asyncio.sleep(0)
        assert calls[-1] == ("late", first, "") and len(calls) == 4

    run(main())


def test_cancel_resolves_the_delivery_alone_and_runs_its_callbacks_once():
    async def main():
        loop = asyncio.get_running_loop()
        batch = FakeBatch(loop)
        cancelled, kept = Delivery(batch, 0), Delivery(batch, 1)
        calls: list[str] = []
        cancelled.add_done_callback(lambda d: calls.append("cancelled"))
        kept.add_done_callback(lambda d: calls.append("kept"))
        assert cancelled.cancel("stop waiting") and cancelled.cancelled() and cancelled.done()
        assert not cancelled.cancel()
        with pytest.raises(asyncio.CancelledError):
            cancelled.result()
        with pytest.raises(asyncio.CancelledError):
            await cancelled
        await asyncio.sleep(0)
        assert calls == ["cancelled"]
        batch.future.set_result(1)
        await asyncio.sleep(0)
        assert calls == ["cancelled", "kept"]  # the ack does not run the cancelled one's again
        assert await kept == (4, 2) and not kept.cancel()

    run(main())


def test_wait_for_times_out_and_cancels_a_pending_gather_promptly():
    async def main():
        loop = asyncio.get_running_loop()
        batch = FakeBatch(loop)
        deliveries = [Delivery(batch, i) for i in range(4)]
        started = loop.time()
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(asyncio.gather(*deliveries), 0.05)
        assert loop.time() - started < 1.0 and all(d.cancelled() for d in deliveries)
        assert not batch.future.done()  # the batch itself is not cancelled: others may still wait on it

    run(main())


def test_wait_and_shield():
    async def main():
        loop = asyncio.get_running_loop()
        fast, slow = FakeBatch(loop), FakeBatch(loop)
        a, b = Delivery(fast, 0), Delivery(slow, 0)
        loop.call_later(0.01, fast.future.set_result, 3)
        done, pending = await asyncio.wait([a, b], return_when=asyncio.FIRST_COMPLETED)
        assert done == {a} and pending == {b}
        shielded = asyncio.ensure_future(asyncio.shield(b))
        await asyncio.sleep(0)
        shielded.cancel()
        with pytest.raises(asyncio.CancelledError):
            await shielded
        assert not b.cancelled()  # shield kept the delivery
        slow.future.set_exception(KafkaTimeoutError())
        done, _ = await asyncio.wait([b])
        assert done == {b} and isinstance(b.exception(), KafkaTimeoutError)

    run(main())


def test_wait_for_one_delivery_times_out_then_another_resolves():
    async def main():
        loop = asyncio.get_running_loop()
        batch = FakeBatch(loop)
        late, waited = Delivery(batch, 0), Delivery(batch, 1)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(late, 0.02)
        assert late.cancelled()
        loop.call_later(0.01, batch.future.set_result, 9)
        assert await asyncio.wait_for(waited, 5) == (4, 10)

    run(main())
