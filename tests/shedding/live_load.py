"""Skewed load on a real Pulsar cluster, from the `pulsar-client` wheel, with every message counted.

One topic in each bundle of a namespace (found through the lookup API's `.../bundle`), a producer and
a consumer on each; topic k sends `rates[k]` messages a second. Each message carries its topic and
sequence number, so the count out is of distinct messages (a redelivery after a bundle moved is not
counted twice) and `lost` is what was acknowledged in but never came out.

Shared by the live tests (tests/shedding/test_live_pulsar.py) and benchmarks/shedding_live.py.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence

import httpx

log = logging.getLogger(__name__)

TICK_S = 0.05


def topics_by_bundle(admin_url: str, namespace: str, bundles: int, limit: int = 2000) -> dict[str, str]:
    """A topic name in each of the namespace's `bundles` bundles: bundle range -> topic."""
    found: dict[str, str] = {}
    with httpx.Client(timeout=30) as http:
        for i in range(limit):
            topic = f"t{i}"
            response = http.get(f"{admin_url}/lookup/v2/topic/persistent/{namespace}/{topic}/bundle")
            response.raise_for_status()
            found.setdefault(response.text.strip().strip('"'), topic)
            if len(found) == bundles:
                return found
    raise RuntimeError(f"found topics for {len(found)} of {bundles} bundles of {namespace} in {limit} names")


def owners(brokers: Sequence[str], prefix: str = "") -> dict[str, str]:
    """bundle -> the broker whose load report lists it (bundles starting with `prefix`)."""
    out: dict[str, str] = {}
    with httpx.Client(timeout=30) as http:
        for broker in brokers:
            try:
                report = http.get(f"http://{broker}/admin/v2/broker-stats/load-report").json()
            except httpx.HTTPError:
                continue
            for bundle in report.get("bundles", []):
                if bundle.startswith(prefix):
                    out[bundle] = broker
    return out


def place_all_on(admin_url: str, brokers: Sequence[str], namespace: str, broker: str, timeout_s: float = 120.0) -> int:
    """Unload every bundle of `namespace` that another broker owns to `broker`, until all are there;
    how many unloads that took."""
    unloads = 0
    deadline = time.monotonic() + timeout_s
    with httpx.Client(timeout=60, follow_redirects=True) as http:
        while True:
            where = owners(brokers, namespace + "/")
            elsewhere = sorted(b for b, owner in where.items() if owner != broker)
            if not elsewhere and where:
                return unloads
            if time.monotonic() > deadline:
                raise RuntimeError(f"bundles of {namespace} still elsewhere than {broker}: {elsewhere}")
            for bundle in elsewhere:
                bundle_range = bundle.rsplit("/", 1)[1]
                response = http.put(f"{admin_url}/admin/v2/namespaces/{namespace}/{bundle_range}/unload",
                                    params={"destinationBroker": broker})
                if response.status_code < 300:
                    unloads += 1
            time.sleep(2.0)


class SkewedLoad:
    """Producers and consumers on one topic per bundle of `namespace`, at `rates` msg/s each."""

    def __init__(self, admin_url: str, service_url: str, namespace: str, rates: Sequence[float],
                 size: int = 1000) -> None:
        import pulsar

        self.namespace = namespace
        self.rates = list(rates)
        self.size = size
        by_bundle = topics_by_bundle(admin_url, namespace, len(self.rates))
        self.topics = [by_bundle[b] for b in sorted(by_bundle)]
        self._client = pulsar.Client(service_url, operation_timeout_seconds=60,
                                     logger=logging.getLogger("pulsar.client"))
        logging.getLogger("pulsar.client").setLevel(logging.ERROR)
        self._lock = threading.Lock()
        self.sent = 0  # send_async called
        self.acked = 0  # acknowledged by a broker
        self.failed = 0  # send failed (no ack): not in, so not expected out
        self._received: set[bytes] = set()
        self.duplicates = 0
        self._consumers = [
            self._client.subscribe(f"persistent://{namespace}/{t}", "load", message_listener=self._on_message)
            for t in self.topics
        ]
        self._producers = [
            self._client.create_producer(f"persistent://{namespace}/{t}", batching_enabled=True,
                                         batching_max_publish_delay_ms=5, send_timeout_millis=120_000,
                                         block_if_queue_full=True)
            for t in self.topics
        ]
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _on_message(self, consumer: object, message: object) -> None:
        key = message.data()[:24]  # type: ignore[attr-defined]
        with self._lock:
            if key in self._received:
                self.duplicates += 1
            else:
                self._received.add(key)
        consumer.acknowledge(message)  # type: ignore[attr-defined]

    def _on_sent(self, result: object, message_id: object) -> None:
        with self._lock:
            if str(result) == "Ok" or str(result).endswith(".Ok"):
                self.acked += 1
            else:
                self.failed += 1

    @property
    def received(self) -> int:
        with self._lock:
            return len(self._received)

    @property
    def lost(self) -> int:
        with self._lock:
            return self.acked - len(self._received)

    def start(self) -> SkewedLoad:
        self._thread = threading.Thread(target=self._pump, name="skewed-load", daemon=True)
        self._thread.start()
        return self

    def _pump(self) -> None:
        owed = [0.0] * len(self.topics)
        seq = 0
        padding = b"x" * max(0, self.size - 24)
        while not self._stop.is_set():
            started = time.monotonic()
            for k, producer in enumerate(self._producers):
                owed[k] += self.rates[k] * TICK_S
                while owed[k] >= 1:
                    owed[k] -= 1
                    seq += 1
                    key = f"{k:04d}:{seq:019d}".encode()[:24].ljust(24, b".")
                    producer.send_async(key + padding, self._on_sent)
                    with self._lock:
                        self.sent += 1
            self._stop.wait(max(0.0, TICK_S - (time.monotonic() - started)))

    def stop(self, drain_s: float = 60.0) -> None:
        """Stop sending, flush, and wait until every acknowledged message came out (or `drain_s`)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        for producer in self._producers:
            producer.flush()
        deadline = time.monotonic() + drain_s
        while time.monotonic() < deadline:
            with self._lock:
                settled = self.acked + self.failed == self.sent and len(self._received) >= self.acked
            if settled:
                break
            time.sleep(0.2)

    def close(self) -> None:
        self._stop.set()
        self._client.close()
