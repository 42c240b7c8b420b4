"""A real Kafka-protocol peer on loopback: librdkafka's mock cluster, reached through ctypes.

The confluent-kafka wheel bundles a librdkafka that exports the (experimental) mock API. Brokers
run inside librdkafka's own threads, so they cost the Python process no GIL time, and they count
the requests they receive: that is the only honest way to count ProduceRequests.
"""

from __future__ import annotations

import ctypes
import glob
import os
import threading
from collections import Counter
from collections.abc import Sequence
from types import TracebackType
from typing import NamedTuple

from rebalancer._numbers import shown
from rebalancer.testing._checks import (
    INT32_MAX,
    TOPIC_PARTITIONS_MAX,
    check_api_key,
    check_broker_id,
    check_brokers,
    check_int,
    check_topic,
    check_topic_name,
)

__all__ = [
    "ADD_PARTITIONS_TO_TXN_API_KEY",
    "API_KEYS",
    "END_TXN_API_KEY",
    "INIT_PRODUCER_ID_API_KEY",
    "PRODUCE_API_KEY",
    "MockKafkaCluster",
    "TrackedRequest",
    "librdkafka_path",
]

PRODUCE_API_KEY = 0
INIT_PRODUCER_ID_API_KEY = 22
ADD_PARTITIONS_TO_TXN_API_KEY = 24
END_TXN_API_KEY = 26
# The Kafka protocol's ApiKeys a producer sends, by name (KIP-482 numbering).
API_KEYS: dict[str, int] = {
    "Produce": 0,
    "Fetch": 1,
    "ListOffsets": 2,
    "Metadata": 3,
    "OffsetCommit": 8,
    "OffsetFetch": 9,
    "FindCoordinator": 10,
    "ApiVersions": 18,
    "InitProducerId": 22,
    "AddPartitionsToTxn": 24,
    "AddOffsetsToTxn": 25,
    "EndTxn": 26,
    "TxnOffsetCommit": 28,
}
_RD_KAFKA_PRODUCER = 0
# Files the handle and the mock's thread open besides one socket per broker (6 measured with
# librdkafka 2.16: queue wake-up pipes, the mock's poll fds), with room for what others open meanwhile.
_FILES_BESIDES_BROKERS = 32

_lib: ctypes.CDLL | None = None
_lib_lock = threading.Lock()


def librdkafka_path() -> str:
    """The librdkafka shared object bundled in the confluent-kafka wheel."""
    import confluent_kafka  # the 'kafka' extra: loaded on use

    site = os.path.dirname(os.path.dirname(os.path.abspath(confluent_kafka.__file__)))
    candidates = sorted(glob.glob(os.path.join(site, "confluent_kafka.libs", "librdkafka*.so*")))
    if not candidates:
        raise FileNotFoundError(f"no librdkafka*.so* under {site}/confluent_kafka.libs")
    return candidates[0]


def _load() -> ctypes.CDLL:
    global _lib
    with _lib_lock:
        if _lib is not None:
            return _lib
        lib = ctypes.CDLL(librdkafka_path())
        vp, c_int, c_size_p = ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_size_t)
        sigs: dict[str, tuple[object, list[object]]] = {
            "rd_kafka_conf_new": (vp, []),
            "rd_kafka_conf_destroy": (None, [vp]),
            "rd_kafka_conf_set": (
                c_int,
                [vp, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t],
            ),
            "rd_kafka_new": (vp, [c_int, vp, ctypes.c_char_p, ctypes.c_size_t]),
            "rd_kafka_destroy": (None, [vp]),
            "rd_kafka_mock_cluster_new": (vp, [vp, c_int]),
            "rd_kafka_mock_cluster_destroy": (None, [vp]),
            "rd_kafka_mock_cluster_bootstraps": (ctypes.c_char_p, [vp]),
            "rd_kafka_mock_topic_create": (c_int, [vp, ctypes.c_char_p, c_int, c_int]),
            "rd_kafka_mock_partition_set_leader": (
                c_int,
                [vp, ctypes.c_char_p, ctypes.c_int32, ctypes.c_int32],
            ),
            "rd_kafka_mock_broker_set_rtt": (c_int, [vp, ctypes.c_int32, c_int]),
            "rd_kafka_mock_broker_set_down": (c_int, [vp, ctypes.c_int32]),
            "rd_kafka_mock_broker_set_up": (c_int, [vp, ctypes.c_int32]),
            "rd_kafka_mock_start_request_tracking": (None, [vp]),
            "rd_kafka_mock_stop_request_tracking": (None, [vp]),
            "rd_kafka_mock_clear_requests": (None, [vp]),
            "rd_kafka_mock_get_requests": (ctypes.POINTER(vp), [vp, c_size_p]),
            "rd_kafka_mock_request_destroy_array": (None, [ctypes.POINTER(vp), ctypes.c_size_t]),
            "rd_kafka_mock_request_id": (ctypes.c_int32, [vp]),
            "rd_kafka_mock_request_api_key": (ctypes.c_int16, [vp]),
            "rd_kafka_mock_request_timestamp": (ctypes.c_int64, [vp]),
            "rd_kafka_mock_push_request_errors_array": (
                None,
                [vp, ctypes.c_int16, ctypes.c_size_t, ctypes.POINTER(c_int)],
            ),
            "rd_kafka_mock_clear_request_errors": (None, [vp, ctypes.c_int16]),
            "rd_kafka_err2str": (ctypes.c_char_p, [c_int]),
        }
        for name, (restype, argtypes) in sigs.items():
            fn = getattr(lib, name)
            fn.restype = restype
            fn.argtypes = argtypes
        _lib = lib
        return lib


class TrackedRequest(NamedTuple):
    """One request a mock broker received, in arrival order."""

    broker_id: int
    api_key: int
    timestamp_us: int  # librdkafka's monotonic clock, microseconds


class MockKafkaCluster:
    """`brokers` mock brokers (ids 1..brokers) speaking the Kafka protocol on 127.0.0.1.

    Use it as a context manager, or call `close()`: the brokers live in native threads that only
    `close()` stops.
    """

    def __init__(self, brokers: int = 3) -> None:
        brokers = check_brokers(brokers)  # KafkaCluster's own check (testing/_checks.py): True is not a count
        _check_files_for(brokers)
        self._lib = _load()
        self.brokers = brokers
        self._topics: dict[str, int] = {}  # made by create_topic: name -> partitions
        errstr = ctypes.create_string_buffer(512)
        conf = self._lib.rd_kafka_conf_new()
        # The handle only owns the cluster; keep it quiet and cheap.
        for key, value in ((b"log_level", b"0"), (b"statistics.interval.ms", b"0")):
            self._lib.rd_kafka_conf_set(conf, key, value, errstr, len(errstr))
        self._rk = self._lib.rd_kafka_new(_RD_KAFKA_PRODUCER, conf, errstr, len(errstr))
        if not self._rk:
            self._lib.rd_kafka_conf_destroy(conf)
            raise RuntimeError(f"rd_kafka_new failed: {errstr.value.decode(errors='replace')}")
        self._mc = self._lib.rd_kafka_mock_cluster_new(self._rk, brokers)
        if not self._mc:
            self._lib.rd_kafka_destroy(self._rk)
            self._rk = None
            raise RuntimeError("rd_kafka_mock_cluster_new failed")
        self.bootstrap_servers: str = self._lib.rd_kafka_mock_cluster_bootstraps(self._mc).decode()
        self._lock = threading.Lock()

    # -- lifecycle -------------------------------------------------------------------------------
    def close(self) -> None:
        """Stop the brokers and free the cluster; safe to call twice."""
        with self._lock:
            if self._mc:
                self._lib.rd_kafka_mock_cluster_destroy(self._mc)
                self._mc = None
            if self._rk:
                self._lib.rd_kafka_destroy(self._rk)
                self._rk = None

    def __enter__(self) -> MockKafkaCluster:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __del__(self) -> None:
        # A leaked cluster keeps native threads and ports alive; free it if the owner forgot.
        if getattr(self, "_mc", None) or getattr(self, "_rk", None):
            self.close()

    # -- topology --------------------------------------------------------------------------------
    def _cluster(self) -> int:
        if not self._mc:
            raise RuntimeError("the mock cluster is closed")
        return self._mc

    def _check(self, err: int, what: str) -> None:
        if err != 0:
            msg = self._lib.rd_kafka_err2str(err).decode(errors="replace")
            raise ValueError(f"{what} failed: {msg} (error {err})")

    def _check_broker(self, broker_id: int) -> None:
        check_broker_id(broker_id, self.brokers, allow_all=True)

    def create_topic(self, name: str, partitions: int, replication_factor: int = 1) -> None:
        """Create `name`; leaders are spread over the brokers by the mock. Names and counts follow a
        real broker's rules (KafkaCluster checks the same), which the mock itself does not check:
        nor does it refuse a name that collides with another's ('a.b' and 'a_b': one metric name)."""
        partitions, replication_factor = check_topic(name, partitions, replication_factor, self.brokers)
        with self._lock:
            for other in self._topics:
                if other != name and other.replace(".", "_") == name.replace(".", "_"):
                    raise ValueError(f"topic name {name!r} collides with existing topic {other!r}")
            err = self._lib.rd_kafka_mock_topic_create(self._cluster(), name.encode(), partitions, replication_factor)
            self._check(err, f"create_topic({name!r})")
            self._topics[name] = partitions

    def set_leader(self, topic: str, partition: int, broker_id: int) -> None:
        """Make `broker_id` the leader of a partition of a topic `create_topic` made (the mock
        would create a topic it does not know, with partition + 1 partitions, without a word)."""
        check_topic_name(topic)
        check_int("partition", partition, 0, TOPIC_PARTITIONS_MAX - 1)
        self._check_broker(broker_id)
        with self._lock:
            partitions = self._topics.get(topic)
        if partitions is None:
            raise ValueError(f"set_leader: no topic {topic!r} here (create_topic makes one)")
        check_int("partition", partition, 0, partitions - 1)
        err = self._lib.rd_kafka_mock_partition_set_leader(
            self._cluster(), topic.encode(), partition, broker_id
        )
        self._check(err, f"set_leader({topic!r}, {partition}, {broker_id})")

    # -- faults ----------------------------------------------------------------------------------
    def set_rtt(self, broker_id: int, ms: int) -> None:
        """Delay every response of `broker_id` (-1: all brokers) by `ms` milliseconds."""
        self._check_broker(broker_id)
        check_int("ms", ms, 0, INT32_MAX)  # not int(ms): 2.5 was cut to 2
        self._check(self._lib.rd_kafka_mock_broker_set_rtt(self._cluster(), broker_id, ms), "set_rtt")

    def set_down(self, broker_id: int) -> None:
        """Disconnect clients and refuse new connections; leadership does not move."""
        self._check_broker(broker_id)
        self._check(self._lib.rd_kafka_mock_broker_set_down(self._cluster(), broker_id), "set_down")

    def set_up(self, broker_id: int) -> None:
        self._check_broker(broker_id)
        self._check(self._lib.rd_kafka_mock_broker_set_up(self._cluster(), broker_id), "set_up")

    # -- request counting (broker side) ----------------------------------------------------------
    def start_request_tracking(self) -> None:
        """Forget earlier requests and start recording every request the brokers receive."""
        mc = self._cluster()
        self._lib.rd_kafka_mock_clear_requests(mc)
        self._lib.rd_kafka_mock_start_request_tracking(mc)

    def stop_request_tracking(self) -> None:
        self._lib.rd_kafka_mock_stop_request_tracking(self._cluster())

    def clear_requests(self) -> None:
        self._lib.rd_kafka_mock_clear_requests(self._cluster())

    def request_log(self) -> list[TrackedRequest]:
        """Every tracked request, in the order the brokers received them."""
        count = ctypes.c_size_t(0)
        reqs = self._lib.rd_kafka_mock_get_requests(self._cluster(), ctypes.byref(count))
        if not reqs:
            return []
        lib = self._lib
        try:
            log = [
                TrackedRequest(
                    int(lib.rd_kafka_mock_request_id(reqs[i])),
                    int(lib.rd_kafka_mock_request_api_key(reqs[i])),
                    int(lib.rd_kafka_mock_request_timestamp(reqs[i])),
                )
                for i in range(count.value)
            ]
        finally:
            lib.rd_kafka_mock_request_destroy_array(reqs, count.value)
        log.sort(key=lambda r: r.timestamp_us)  # stable: ties keep the mock's order
        return log

    def requests(self, api_key: int | None = None) -> dict[int, int]:
        """{broker_id: count} of tracked requests, optionally of one ApiKey."""
        if api_key is not None:
            check_api_key(api_key)  # 'x' matched no request and counted nothing, without a word
        per_broker: Counter[int] = Counter(
            r.broker_id for r in self.request_log() if api_key in (None, r.api_key)
        )
        return dict(sorted(per_broker.items()))

    def requests_by_api_key(self) -> dict[int, int]:
        """{api_key: count} of tracked requests over all brokers (Produce 0, AddPartitionsToTxn 24, EndTxn 26...)."""
        return dict(sorted(Counter(r.api_key for r in self.request_log()).items()))

    def push_request_errors(self, api_key: int, errors: Sequence[int]) -> None:
        """The next len(errors) requests of `api_key`, on any broker, fail with these Kafka error codes in turn.

        E.g. `push_request_errors(API_KEYS["Produce"], [47])`: the next ProduceRequest is answered
        INVALID_PRODUCER_EPOCH, what a broker tells a producer fenced by a newer instance.
        """
        check_api_key(api_key)
        codes = list(errors)
        if not codes or not all(isinstance(c, int) and not isinstance(c, bool) and -1 <= c <= 2**15 - 1 for c in codes):
            raise ValueError(f"errors must be a non-empty list of Kafka error codes (ints in -1..32767), got {shown(errors)}")
        array = (ctypes.c_int * len(codes))(*codes)
        self._lib.rd_kafka_mock_push_request_errors_array(self._cluster(), api_key, len(codes), array)

    def clear_request_errors(self, api_key: int) -> None:
        """Forget errors pushed for `api_key` that no request has consumed yet."""
        check_api_key(api_key)
        self._lib.rd_kafka_mock_clear_request_errors(self._cluster(), api_key)

    def produce_requests(self) -> dict[int, int]:
        """{broker_id: ProduceRequests received} since `start_request_tracking()`."""
        return self.requests(PRODUCE_API_KEY)


def _check_files_for(brokers: int) -> None:
    """Refuse a cluster this process has no file descriptors for: librdkafka's mock, failing to open
    a broker's socket, aborts the process (an assert in rd_kafka_mock_cluster_destroy)."""
    try:
        import resource

        limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        in_use = len(os.listdir("/proc/self/fd"))
    except (ImportError, OSError):  # not Linux: no /proc to count open files by
        return
    if limit == resource.RLIM_INFINITY:
        return
    free = limit - in_use - _FILES_BESIDES_BROKERS
    if brokers > free:
        raise ValueError(
            f"brokers must be at most {max(free, 0)} in this process (a socket each; "
            f"{in_use} of its {limit} files, RLIMIT_NOFILE, are open), got {brokers}"
        )
