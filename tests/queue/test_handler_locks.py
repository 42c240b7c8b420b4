"""One handler object is never entered by two workers, however it was registered."""

from __future__ import annotations

import threading

from queue_helpers import ReentryDetector, item, make_types

from rebalancer.queue import BatchQueueConfig, BatchQueueManager, PartitionPolicy, ThreadPolicy


def test_bound_method_registered_for_many_types_is_never_reentered():
    types = make_types(8, "L")
    q = BatchQueueManager.create("locks-bound", BatchQueueConfig(threads=ThreadPolicy.fixed(4),
                                                                 partitions=PartitionPolicy.fixed(8)))
    violations: list[str] = []
    shared = ReentryDetector(violations, pause=0.0005)
    for t in types:  # eight bound-method objects, one underlying handler
        q.add_handler(t, shared.consume)
    owners = {o for o in q.stats().owners}
    assert len(owners) == 4  # the types really are spread over all workers

    def producer(k: int) -> None:
        for n in range(20_000):
            q.produce(item(types[(n + k) % len(types)], k * 20_000 + n))

    threads = [threading.Thread(target=producer, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    BatchQueueManager.shutdown("locks-bound")
    assert sorted(shared.seen) == list(range(40_000))
    assert violations == []
