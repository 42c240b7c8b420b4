"""Contract tests: the behaviour of every private aiokafka name `aiokafka_adapter` relies on.

An aiokafka upgrade that renames or changes one of them fails here, in one place. The last tests
keep the seam single: no other module of rebalancer.produce touches a private aiokafka name.
"""

from __future__ import annotations

import asyncio
import importlib
import io
import pathlib
import re
import tokenize
from collections import deque

import aiokafka
import pytest
from aiokafka.client import AIOKafkaClient
from aiokafka.errors import KafkaError
from aiokafka.producer.message_accumulator import BatchBuilder, MessageAccumulator, MessageBatch
from aiokafka.producer.sender import Sender
from aiokafka.producer.transaction_manager import TransactionManager
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.structs import TopicPartition

import rebalancer.produce
from rebalancer.produce import aiokafka_adapter
from rebalancer.produce.aiokafka_adapter import PRIVATE_NAMES
from rebalancer.testing import MockKafkaCluster

TP = TopicPartition("t", 0)
PRODUCE_DIR = pathlib.Path(rebalancer.produce.__file__).parent


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, timeout=30))


class FakeCluster:
    def leader_for_partition(self, tp: TopicPartition) -> int:
        return 1


def owner(path: str) -> type:
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


# -- every listed name exists ------------------------------------------------------------------------
def test_every_listed_class_attribute_exists_or_is_set_by_the_constructor():
    async def main():
        builder = BatchBuilder(1000, 0)
        batch = MessageBatch(TP, builder, 10.0, 0.0)
        accumulator = MessageAccumulator(FakeCluster(), 1000, 0, 10.0)
        client = AIOKafkaClient(bootstrap_servers="127.0.0.1:1")
        sender = Sender(client, acks=-1, txn_manager=None, message_accumulator=accumulator, retry_backoff_ms=100,
                        request_timeout_ms=1000)  # fmt: skip
        instances = {BatchBuilder: builder, MessageBatch: batch, MessageAccumulator: accumulator,
                     AIOKafkaClient: client, Sender: sender}  # fmt: skip
        missing = []
        for path, names in PRIVATE_NAMES.items():
            cls = owner(path)
            for name in names:
                if not hasattr(instances[cls], name):
                    missing.append(f"{path}.{name}")
        await client.close()
        return missing

    assert run(main()) == []


# -- BatchBuilder -----------------------------------------------------------------------------------
def test_batch_builder_private_state():
    builder = BatchBuilder(200, 0)
    assert isinstance(builder._builder, DefaultRecordBatchBuilder)
    assert builder._relative_offset == 0 and builder._closed is False
    # The adapter appends through the C builder: (offset, timestamp, key, value, headers) -> metadata.size
    meta = builder._builder.append(builder._relative_offset, None, None, b"v" * 10, [])
    assert meta is not None and meta.size > 10
    builder._relative_offset += 1
    assert builder.record_count() == 1
    while builder._builder.append(builder._relative_offset, None, None, b"v" * 50, []) is not None:
        builder._relative_offset += 1
    assert builder._relative_offset == builder.record_count() > 1  # None once full, nothing appended
    builder.close()
    assert builder._closed is True and builder.append(timestamp=None, key=None, value=b"x") is None


# -- MessageBatch -----------------------------------------------------------------------------------
def test_message_batch_builder_and_drain_waiter():
    async def main():
        builder = BatchBuilder(1000, 0)
        batch = MessageBatch(TP, builder, 10.0, 0.0)
        assert batch._builder is builder
        assert not batch._drain_waiter.done()
        batch.drain_ready()  # what _pop_batch calls when the sender takes it
        assert batch._drain_waiter.done() and batch.retry_count == 1
        batch.reset_drain()  # what reenqueue calls
        assert not batch._drain_waiter.done()
        error = KafkaError("x")
        batch.failure(error)
        assert batch._drain_waiter.exception() is error and batch.future.exception() is error

    run(main())


# -- MessageAccumulator -----------------------------------------------------------------------------
def make_batch(accumulator: MessageAccumulator, tp: TopicPartition, records: int) -> MessageBatch:
    batch = MessageBatch(tp, accumulator.create_builder(), 10.0, 0.0)
    for _ in range(records):
        assert batch.append(None, b"v", None) is not None
    return batch


def test_accumulator_batches_pending_and_pop_batch_with_sequences():
    async def main():
        txn = TransactionManager(None, 1000)
        txn.set_pid_and_epoch(7, 3)
        accumulator = MessageAccumulator(FakeCluster(), 1000, 0, 10.0, txn_manager=txn)
        assert isinstance(accumulator._batches, dict) and accumulator._pending_batches == set()
        first, second = make_batch(accumulator, TP, 4), make_batch(accumulator, TP, 2)
        accumulator._batches[TP] = deque([first, second])
        popped = accumulator._pop_batch(TP)
        assert popped is first and list(accumulator._batches[TP]) == [second]
        assert accumulator._pending_batches == {first} and first._drain_waiter.done()
        assert txn.sequence_number(TP) == 4  # the sequence advanced by the batch's record count
        assert accumulator._pop_batch(TP) is second and TP not in accumulator._batches  # empty queue deleted
        assert txn.sequence_number(TP) == 6
        first.done(100)
        await asyncio.sleep(0)  # the done-callback leaves the pending set
        assert accumulator._pending_batches == {second}
        accumulator.reenqueue(second)  # a retry: back to the front, out of the pending set
        assert list(accumulator._batches[TP]) == [second] and accumulator._pending_batches == set()
        again = accumulator._pop_batch(TP)
        assert again is second and txn.sequence_number(TP) == 6  # a retry keeps its sequence

    run(main())


def test_accumulator_waiter_future_fail_all_and_flush_for_commit():
    async def main():
        accumulator = MessageAccumulator(FakeCluster(), 1000, 0, 10.0)
        assert accumulator.waiter() is accumulator._waiter_future and not accumulator._waiter_future.done()
        queued, in_flight = make_batch(accumulator, TP, 1), make_batch(accumulator, TopicPartition("t", 1), 1)
        accumulator._batches[TP] = deque([queued])
        accumulator._pending_batches.add(in_flight)
        flushing = asyncio.ensure_future(accumulator.flush_for_commit())
        await asyncio.sleep(0)
        assert accumulator._waiter_future.done()  # flush_for_commit wakes the sender
        assert queued._builder._closed  # and closes the queued builders
        assert not flushing.done()  # it waits for queued and in-flight batches alike
        queued.done(0)
        await asyncio.sleep(0)
        assert not flushing.done()
        error = KafkaError("boom")
        accumulator.fail_all(error)
        await flushing
        assert in_flight.future.exception() is error

    run(main())


# -- Sender -----------------------------------------------------------------------------------------
def test_sender_runs_the_subclass_routine_and_fails_all_through_fail_all():
    async def main():
        accumulator = MessageAccumulator(FakeCluster(), 1000, 0, 10.0)
        client = AIOKafkaClient(bootstrap_servers="127.0.0.1:1")
        started = asyncio.Event()
        error = KafkaError("dead")

        class Probe(Sender):
            async def _sender_routine(self) -> None:
                started.set()
                raise error

        sender = Probe(client, acks=-1, txn_manager=None, message_accumulator=accumulator, retry_backoff_ms=100,
                       request_timeout_ms=1000)  # fmt: skip
        await sender._maybe_wait_for_pid()  # no transaction manager: returns at once
        assert sender._maybe_do_transactional_request is not None
        batch = make_batch(accumulator, TP, 1)
        accumulator._batches[TP] = deque([batch])
        await sender.start()  # start() runs _sender_routine as the sender task, _fail_all as its callback
        await started.wait()
        await asyncio.wait([sender.sender_task])
        await asyncio.sleep(0)
        assert batch.future.exception() is error
        await client.close()

    run(main())


def test_sender_transactional_request_order():
    async def main():
        txn = TransactionManager("contract", 1000)
        txn.set_pid_and_epoch(1, 0)
        accumulator = MessageAccumulator(FakeCluster(), 1000, 0, 10.0, txn_manager=txn)
        client = AIOKafkaClient(bootstrap_servers="127.0.0.1:1")
        sender = Sender(client, acks=-1, txn_manager=txn, message_accumulator=accumulator, retry_backoff_ms=100,
                        request_timeout_ms=1000)  # fmt: skip
        assert sender._maybe_do_transactional_request() is None  # nothing to do
        txn.begin_transaction()
        txn.maybe_add_partition_to_txn(TP)
        assert txn.partitions_to_add() == {TP}
        task = sender._maybe_do_transactional_request()  # AddPartitionsToTxn comes first
        assert isinstance(task, asyncio.Task)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        txn.partition_added(TP)
        assert txn.txn_partitions == {TP} and not txn.partitions_to_add()
        await client.close()

    run(main())


# -- AIOKafkaClient ---------------------------------------------------------------------------------
@pytest.mark.kafka
def test_client_wait_on_metadata_returns_partition_ids():
    with MockKafkaCluster(brokers=1) as cluster:
        cluster.create_topic("contract", partitions=4)

        async def main():
            client = AIOKafkaClient(bootstrap_servers=cluster.bootstrap_servers)
            await client.bootstrap()
            try:
                return await aiokafka_adapter.wait_on_metadata(client, "contract")
            finally:
                await client.close()

        assert run(main()) == {0, 1, 2, 3}


# -- one seam ---------------------------------------------------------------------------------------
def aiokafka_private_names() -> set[str]:
    """Every `_name` aiokafka's own code sets or reads on an object."""
    root = pathlib.Path(aiokafka.__file__).parent
    names: set[str] = set()
    for path in root.rglob("*.py"):
        names.update(re.findall(r"\.(_[a-z][A-Za-z0-9_]*)\b", path.read_text()))
    return names


def attribute_accesses(path: pathlib.Path) -> list[tuple[int, str, str]]:
    """(line, owner token, attribute) of every `x._name` in a file, strings and comments skipped.

    Tokens, not `ast`: CPython 3.11.7's ast.parse can fail spuriously ("recursion depth mismatch").
    """
    tokens = [t for t in tokenize.generate_tokens(io.StringIO(path.read_text()).readline)
              if t.type not in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT)]  # fmt: skip
    found = []
    for before, dot, name in zip(tokens, tokens[1:], tokens[2:]):
        if dot.string == "." and name.type == tokenize.NAME and name.string.startswith("_"):
            if not name.string.startswith("__"):
                found.append((name.start[0], before.string, name.string))
    return found


def test_no_other_produce_module_touches_a_private_aiokafka_name():
    private = aiokafka_private_names()
    assert {n for names in PRIVATE_NAMES.values() for n in names} <= private
    offenders = []
    for path in sorted(PRODUCE_DIR.glob("*.py")):
        if path.name == "aiokafka_adapter.py":
            continue
        text = path.read_text()
        for match in re.finditer(r"^\s*(?:from|import)\s+(aiokafka[\w.]*)(?:\s+import\s+([^\n]*))?", text, re.M):
            module, names = match[1], match[2] or ""
            if module.startswith(("aiokafka.producer.message_accumulator", "aiokafka.producer.sender")):
                offenders.append(f"{path.name}: imports {module}")
            offenders += [f"{path.name}: imports {n}" for n in re.findall(r"\b_\w+", names)]
        # Our own private attributes are read on `self`; anything else named like aiokafka's is a leak.
        offenders += [f"{path.name}:{line} {owner_}.{attr}" for line, owner_, attr in attribute_accesses(path)
                      if owner_ not in ("self", "cls") and attr in private]  # fmt: skip
    assert offenders == []


def test_the_adapter_uses_only_listed_private_names():
    private = aiokafka_private_names()
    listed = {n for names in PRIVATE_NAMES.values() for n in names}
    path = PRODUCE_DIR / "aiokafka_adapter.py"
    own = set(re.findall(r"^\s+(?:async )?def (_\w+)", path.read_text(), re.M)) - listed  # the adapter's helpers
    used = {attr for _, _, attr in attribute_accesses(path)} | set(re.findall(r"def (_\w+)", path.read_text()))
    unlisted = {name for name in used if name in private and name not in own} - listed
    assert unlisted == set()
    assert own.isdisjoint(private), "an adapter helper shadows an aiokafka private name"


# aiokafka's public surface: the package's `__all__`, and the modules its API reference documents
# (errors, structs, abc, helpers), each by its own `__all__` (helpers has none: its one documented name).
PUBLIC_AIOKAFKA: dict[str, frozenset[str]] = {
    "aiokafka": frozenset(aiokafka.__all__),
    **{name: frozenset(importlib.import_module(name).__all__) for name in ("aiokafka.errors", "aiokafka.structs", "aiokafka.abc")},
    "aiokafka.helpers": frozenset({"create_ssl_context"}),
}  # fmt: skip
SRC = PRODUCE_DIR.parent
_IMPORTS_SCRIPT = """
import ast, json, pathlib, sys
out = []
for path in sorted(pathlib.Path(sys.argv[1]).rglob("*.py")):
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [[str(path), node.lineno, alias.name, None] for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out += [[str(path), node.lineno, node.module, alias.name] for alias in node.names]
print(json.dumps(out))
"""


def src_imports() -> list[tuple[pathlib.Path, int, str, str | None]]:
    """(file, line, module, name) of every absolute import under src/rebalancer, function-level ones too.

    ast in a fresh interpreter: CPython 3.11.7's ast.parse can fail spuriously in a process that has
    seen a RecursionError (see attribute_accesses).
    """
    import json
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", _IMPORTS_SCRIPT, str(SRC)], capture_output=True, text=True, check=True)
    return [(pathlib.Path(p), line, module, name) for p, line, module, name in json.loads(out.stdout)]


def non_public_aiokafka_imports(imports: list[tuple[pathlib.Path, int, str, str | None]]) -> list[str]:
    offenders = []
    for path, line, module, name in imports:
        if module != "aiokafka" and not module.startswith("aiokafka."):
            continue
        public = module in PUBLIC_AIOKAFKA if name is None else name in PUBLIC_AIOKAFKA.get(module, ())
        if not public and path.name != "aiokafka_adapter.py":
            offenders.append(f"{path.relative_to(SRC)}:{line} {module}{'' if name is None else ' ' + name}")
    return offenders


def test_only_the_adapter_imports_aiokafka_beyond_its_public_all():
    imports = src_imports()
    assert any(path.name == "producer.py" and module.startswith("aiokafka") for path, _, module, _ in imports)
    assert non_public_aiokafka_imports(imports) == []


def test_the_import_check_catches_a_private_import():
    fake = [
        (SRC / "produce" / "producer.py", 3, "aiokafka.producer.transaction_manager", "TransactionManager"),
        (SRC / "produce" / "producer.py", 4, "aiokafka.util", "INTEGER_MAX_VALUE"),  # in util.__all__, util is not public
        (SRC / "produce" / "producer.py", 5, "aiokafka", "codec"),
        (SRC / "produce" / "producer.py", 6, "aiokafka.record.default_records", None),
        (SRC / "produce" / "producer.py", 7, "aiokafka", "AIOKafkaClient"),
        (SRC / "produce" / "producer.py", 8, "aiokafka.errors", "KafkaError"),
        (SRC / "produce" / "aiokafka_adapter.py", 9, "aiokafka.producer.sender", "Sender"),
    ]
    assert non_public_aiokafka_imports(fake) == [
        "produce/producer.py:3 aiokafka.producer.transaction_manager TransactionManager",
        "produce/producer.py:4 aiokafka.util INTEGER_MAX_VALUE",
        "produce/producer.py:5 aiokafka codec",
        "produce/producer.py:6 aiokafka.record.default_records",
    ]


def test_the_adapters_fast_constructors_set_every_attribute_aiokafkas_own_do():
    """Batch and new_builder set aiokafka's private state directly (a per-message cost when each
    message is its own batch); an aiokafka that adds state to either constructor fails here."""
    from rebalancer.produce.aiokafka_adapter import Batch, new_builder
    from rebalancer.produce.stats import DeliveryCounters

    async def main():
        loop = asyncio.get_running_loop()
        # new_builder is the C builder aiokafka's BatchBuilder wraps, made with the same arguments.
        theirs_builder, ours_builder = BatchBuilder(1000, 0), new_builder(1000, 0, False)
        assert type(ours_builder) is type(vars(theirs_builder)["_builder"]) is DefaultRecordBatchBuilder
        assert vars(theirs_builder)["_builder"].size() == ours_builder.size()
        theirs = MessageBatch(TP, theirs_builder, 10.0, 0.0)
        ours = Batch(TP, ours_builder, 10.0, DeliveryCounters(), loop)
        assert vars(theirs).keys() <= vars(ours).keys()
        assert (ours.tp, ours.record_count, ours.retry_count, ours.expired()) == (TP, 0, 0, False)
        assert ours.is_empty() and not ours.future.done() and ours.future.get_loop() is loop
        # Every MessageBatch method that reads the wrapper's state is Batch's own.
        for name in ("record_count", "is_empty", "set_producer_state", "get_data_buffer", "drain_ready",
                     "reset_drain", "wait_drain", "remaining_linger", "done", "done_noack", "failure"):  # fmt: skip
            assert name in vars(Batch), name

    run(main())
