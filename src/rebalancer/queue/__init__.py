"""BatchQueue: a partitioned, self-draining in-process queue with typed handler dispatch.

    >>> from rebalancer.queue import BatchQueueConfig, BatchQueueManager, ThreadPolicy
    >>> seen = []
    >>> q = BatchQueueManager.create("doc-example", BatchQueueConfig(threads=ThreadPolicy.fixed(2)))
    >>> q.add_handler(int, seen.extend)
    >>> all(q.produce(i) for i in range(1000))
    True
    >>> BatchQueueManager.shutdown("doc-example")
    True
    >>> sorted(seen) == list(range(1000))
    True
"""

from rebalancer.queue.batch_queue import BatchQueue
from rebalancer.queue.config import BatchQueueConfig, HandlerConsumer
from rebalancer.queue.manager import BatchQueueManager
from rebalancer.queue.policies import BufferStrategy, PartitionPolicy, ThreadPolicy
from rebalancer.queue.scheduler import SHARED_SCHEDULERS
from rebalancer.queue.selectors import PartitionSelector
from rebalancer.queue.stats import BatchQueueStats, PartitionUsage, RebalanceReport

__all__ = [
    "SHARED_SCHEDULERS",
    "BatchQueue",
    "BatchQueueConfig",
    "BatchQueueManager",
    "BatchQueueStats",
    "BufferStrategy",
    "HandlerConsumer",
    "PartitionPolicy",
    "PartitionSelector",
    "PartitionUsage",
    "RebalanceReport",
    "ThreadPolicy",
]
