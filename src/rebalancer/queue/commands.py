"""`rebalancer queue demo`: a skewed workload through a BatchQueue, then its stats."""

from __future__ import annotations

import argparse
import threading
import time

import numpy as np

from rebalancer._args import finite_float, integer
from rebalancer.queue.batch_queue import BatchQueue
from rebalancer.queue.config import BatchQueueConfig, HandlerConsumer
from rebalancer.queue.manager import BatchQueueManager
from rebalancer.queue.policies import BufferStrategy, PartitionPolicy, ThreadPolicy


def register(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    demo = sub.add_parser(
        "demo",
        help="push a Zipf-skewed workload of many types through a queue",
        description="Producer threads push items of many types, a few of them much hotter than the rest, "
        "through a BatchQueue for a few seconds; drain workers call one handler per type. It prints "
        "the busiest partitions, the items each drain worker handled (with --rebalance-ms, throughput "
        "rebalancing evens them out) and the counters, which must reconcile: every item produced is "
        "dispatched or counted as unhandled.",
    )
    demo.add_argument("--types", type=integer(), default=300, help="item types, one handler each")
    demo.add_argument("--seconds", type=finite_float(), default=3.0, help="how long producers run")
    demo.add_argument("--threads", type=integer(), default=4, help="drain workers")
    demo.add_argument("--producers", type=integer(), default=2, help="producer threads")
    demo.add_argument("--skew", type=finite_float(), default=1.1, help="Zipf exponent of per-type volume")
    demo.add_argument("--rebalance-ms", type=finite_float(), default=0, help="throughput rebalancing interval; 0 turns it off")
    demo.add_argument("--top", type=integer(), default=10, help="partitions to show in the usage table")
    demo.set_defaults(func=run_demo)


class _Tally(HandlerConsumer):
    """Per-type aggregation; not thread-safe on purpose: the queue never calls it concurrently."""

    def __init__(self) -> None:
        self.items = 0
        self.total = 0

    def consume(self, batch: list) -> None:
        self.items += len(batch)
        self.total += sum(x.value for x in batch)


def _check(name: str, value: float, minimum: float) -> None:
    if value < minimum:
        raise ValueError(f"--{name} must be >= {minimum:g}, got {value:g}")


def run_demo(args: argparse.Namespace) -> int:
    from rebalancer._console import console as make_console
    from rebalancer._console import print_table, print_wrapped

    for name, minimum in (("types", 1), ("threads", 1), ("producers", 1), ("top", 0)):
        _check(name, getattr(args, name), minimum)
    _check("seconds", args.seconds, 0.1)
    _check("skew", args.skew, 0.0)
    _check("rebalance-ms", args.rebalance_ms, 0.0)
    console = make_console()
    types = [type(f"Metric{i:03d}", (), {"__slots__": ("value",)}) for i in range(args.types)]
    weights = 1.0 / np.arange(1, args.types + 1) ** args.skew
    rng = np.random.default_rng(7)
    pattern = rng.choice(args.types, size=200_000, p=weights / weights.sum())
    samples = []
    for t in pattern.tolist():
        item = types[t]()
        item.value = 1
        samples.append(item)

    name = "demo"
    BatchQueueManager.shutdown(name)
    queue: BatchQueue = BatchQueueManager.create(name, BatchQueueConfig(
        threads=ThreadPolicy.fixed(args.threads), partitions=PartitionPolicy.adaptive(),
        buffer_size=10_000, strategy=BufferStrategy.BLOCKING, rebalance_interval_ms=args.rebalance_ms,
    ))
    tallies = [_Tally() for _ in types]
    for t, tally in zip(types, tallies):
        queue.add_handler(t, tally)

    stop = time.monotonic() + args.seconds
    accepted = [0] * args.producers

    def producer(k: int) -> None:
        produce = queue.produce
        mine = samples[k :: args.producers]
        n = 0
        while time.monotonic() < stop:
            for item in mine:
                n += produce(item)
        accepted[k] = n

    print_wrapped(console, f"BatchQueue demo: {args.types} types (Zipf s={args.skew}), {args.producers} producers, "
                  f"{queue.thread_count} drain workers, {queue.partition_count} partitions, {args.seconds:g} s",
                  style="bold")
    started = time.perf_counter()
    threads = [threading.Thread(target=producer, args=(k,)) for k in range(args.producers)]
    for t in threads:
        t.start()
    busiest = queue.stats()
    with console.status("producing…"):
        while any(t.is_alive() for t in threads):
            time.sleep(0.1)
            snapshot = queue.stats()
            if snapshot.total_used >= busiest.total_used:
                busiest = snapshot
    for t in threads:
        t.join()
    before_shutdown = busiest
    BatchQueueManager.shutdown(name)
    elapsed = time.perf_counter() - started
    stats = queue.stats()

    headers = ["partition", "types", "used (items)", "capacity (items)", "used (%)"]
    rows = []
    for u in before_shutdown.top_n(args.top):
        kinds = before_shutdown.partition_types.get(u.partition, ())
        rows.append([str(u.partition), ", ".join(k.rsplit(".", 1)[-1] for k in kinds)[:40], f"{u.used:,}",
                     f"{u.capacity:,}", f"{u.percentage:.1f}"])
    print_table(console, f"top {args.top} partitions by buffer use (busiest moment)", headers, rows,
                right=[h for h in headers if h != "types"])

    taken = list(queue.stats().worker_items_total)
    rows = [[str(i), str(sum(1 for o in stats.owners if o == i)), f"{n:,}"] for i, n in enumerate(taken)]
    headers = ["worker", "partitions", "items"]
    print_table(console, "items per drain worker", headers, rows, right=headers)
    peak = max(taken, default=0)
    if peak:
        print_wrapped(console, f"worker load ratio (max/mean items): {peak * len(taken) / sum(taken):.2f}")

    rows = [[f"{c} (items)", f"{getattr(stats, c):,}"]
            for c in ("produced", "dispatched", "dropped", "unhandled", "failed", "rejected")]
    rows.append(["throughput (items/s)", f"{stats.dispatched / elapsed:,.0f}"])
    print_table(console, "counters", ["counter", "value"], rows, right=["value"])
    if stats.last_rebalance is not None:
        print_wrapped(console, f"last rebalance: {stats.last_rebalance}", hang="  ")
    handled = sum(t.items for t in tallies)
    ok = stats.produced == stats.dispatched + stats.unhandled == handled == sum(accepted)
    print_wrapped(console, "reconciled: produced == dispatched + unhandled == handled" if ok else
                  "NOT reconciled", style=None if ok else "red")
    return 0 if ok else 1
