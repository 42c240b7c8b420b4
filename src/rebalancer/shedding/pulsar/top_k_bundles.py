"""Port of ``TopKBundles`` (extensible load manager): the top bundles a broker publishes in its load
report, ranked by ``NamespaceBundleStats.compareTo`` with Pulsar's partial quicksort."""

from __future__ import annotations

from rebalancer.shedding.java import java_round
from rebalancer.shedding.model import BundleLoad

_THROUGHPUT_RESOLUTION = 1e5  # NamespaceBundleStats compares throughputs to 100 kB/s
_RATE_RESOLUTION = 100.0  # ... and message rates to 100 msg/s


def _rank(load: BundleLoad) -> tuple[int, int, int]:
    """What ``NamespaceBundleStats.compareTo`` compares (topics, connections and cache are 0 here)."""
    return (
        java_round(load.msg_throughput_in / _THROUGHPUT_RESOLUTION),
        java_round(load.msg_throughput_out / _THROUGHPUT_RESOLUTION),
        java_round((load.msg_rate_in + load.msg_rate_out) / _RATE_RESOLUTION),
    )


def _cmp(a: tuple[int, int, int], b: tuple[int, int, int]) -> int:
    return (a > b) - (a < b)


def top_bundles(stats: list[tuple[str, BundleLoad]], k: int) -> list[str]:
    """``TopKBundles.update``: the ``k`` largest bundles with throughput, smallest of them first.

    ``stats`` is the broker's bundle stats in the order its map iterates. The partial quicksort and the
    stable sort of its front are Pulsar's, so equals come out in Pulsar's order.
    """
    arr = [
        (name, _rank(load)) for name, load in stats if load.msg_throughput_in + load.msg_throughput_out != 0
    ]
    if not arr:
        return []
    k = min(k, len(arr))
    start, end, target = 0, len(arr) - 1, k - 1
    while start < end:
        lo, hi, mid = start, end, start
        pivot = arr[hi][1]
        while mid <= hi:
            cmp = _cmp(pivot, arr[mid][1])
            if cmp < 0:
                arr[lo], arr[mid] = arr[mid], arr[lo]
                lo += 1
                mid += 1
            elif cmp > 0:
                arr[mid], arr[hi] = arr[hi], arr[mid]
                hi -= 1
            else:
                mid += 1
        if lo <= target < mid:
            end = lo
            break
        if target < lo:
            end = lo - 1
        else:
            start = mid
    if end < 0:
        raise ValueError("max_number_of_bundles_in_bundle_load_report must be >= 1")
    arr[:end] = sorted(arr[:end], key=lambda item: tuple(-v for v in item[1]))
    return [arr[i][0] for i in range(k - 1, -1, -1)]
