"""Skewed load on a real Pulsar cluster, from the `pulsar-client` wheel, with every message counted.

One topic in each bundle of a namespace (found through the lookup API's `.../bundle`), a producer and
a consumer on each; topic k sends `rates[k]` messages a second. Each message carries its topic and
sequence number, so the count out is of distinct messages (a redelivery after a bundle moved is not
counted twice) and `lost` is what was acknowledged in but never came out.

A starting placement is made in two steps, each waiting on what the cluster shows (polled, with a
generous deadline: a loaded machine is slow) rather than for a fixed time:
- `place_all_on` moves every bundle to one broker before any client connects, reading each bundle's
  owner from the lookup API, which answers from the bundle's ownership;
- `wait_for_load`, once the load runs, waits until the brokers' load reports show that placement
  with its traffic. A report lists a bundle only from the broker's first stats update after the
  bundle's topic loaded (`statsUpdateFrequencyInSecs`, 2 s on `PulsarCluster`, later on a loaded
  machine), so a report read just after a move misses bundles: it cannot tell where one is.

Shared by the live tests (tests/shedding/test_live_pulsar.py) and benchmarks/shedding_live.py.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

import httpx

log = logging.getLogger(__name__)

TICK_S = 0.05
POLL_S = 0.5  # between two reads of the admin API while waiting for a state


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


def owner(http: httpx.Client, admin_url: str, namespace: str, topic: str) -> str | None:
    """The broker owning `topic`'s bundle, from the lookup API (which gives a bundle with no owner
    one); None while the bundle changes hands (the lookup fails, and a later one answers)."""
    try:
        response = http.get(f"{admin_url}/lookup/v2/topic/persistent/{namespace}/{topic}")
        response.raise_for_status()
        return str(response.json()["httpUrl"]).removeprefix("http://")
    except (httpx.HTTPError, ValueError, KeyError, TypeError):
        return None


def place_all_on(admin_url: str, namespace: str, topics: Mapping[str, str], broker: str,
                 timeout_s: float = 120.0) -> int:
    """Give every bundle of `namespace` (`topics`: bundle range -> a topic in it) to `broker`, before
    any client connects; how many unloads that took.

    A bundle on another broker is unloaded with `destinationBroker`, and the next lookup, this
    function's own (no client is there to make one), places it there. Done when a lookup of every
    bundle answers `broker`.
    """
    unloads = 0
    deadline = time.monotonic() + timeout_s
    with httpx.Client(timeout=60, follow_redirects=True) as http:
        while True:
            where = {b: owner(http, admin_url, namespace, topic) for b, topic in sorted(topics.items())}
            elsewhere = [bundle for bundle, at in where.items() if at != broker]
            if not elsewhere:
                log.info("%s: every bundle on %s after %d unloads", namespace, broker, unloads)
                return unloads
            if time.monotonic() > deadline:
                raise RuntimeError(f"bundles of {namespace} still not on {broker} after {timeout_s:g} s: "
                                   f"{ {b: where[b] for b in elsewhere} }")
            for bundle in elsewhere:
                if where[bundle] is None:
                    continue  # changing hands: asked again next round
                response = http.put(f"{admin_url}/admin/v2/namespaces/{namespace}/{bundle}/unload",
                                    params={"destinationBroker": broker})
                if response.status_code < 300:
                    unloads += 1
            time.sleep(POLL_S)


def _report(http: httpx.Client, broker: str) -> dict[str, Any] | None:
    try:
        data = http.get(f"http://{broker}/admin/v2/broker-stats/load-report").json()
    except (httpx.HTTPError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def wait_for_load(brokers: Sequence[str], namespace: str, bundles: Sequence[str], broker: str,
                  timeout_s: float = 120.0) -> None:
    """Until `broker`'s load report lists every one of `bundles` (ranges of `namespace`) with messages
    coming in, and no other broker's report lists any of them: what a watch's first cycle must read.
    """
    names = {f"{namespace}/{b}" for b in bundles}
    started = time.monotonic()
    deadline = started + timeout_s
    with httpx.Client(timeout=30) as http:
        while True:
            reports = {b: _report(http, b) for b in brokers}
            ours = reports[broker] or {}
            listed, stats = set(ours.get("bundles") or ()), ours.get("lastStats") or {}
            busy = {n for n in names if n in listed and (stats.get(n) or {}).get("msgRateIn", 0) > 0}
            others = [r or {} for b, r in reports.items() if b != broker]
            elsewhere = {n for r in others for n in r.get("bundles") or ()} & names
            unanswered = sorted(b for b, r in reports.items() if r is None)
            if busy == names and not elsewhere and not unanswered:
                log.info("%s: the load reports show it on %s after %.1f s", namespace, broker,
                         time.monotonic() - started)
                return
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"the load reports did not show {namespace}'s {len(names)} bundles busy on {broker} "
                    f"within {timeout_s:g} s: {len(busy)} busy there, listed elsewhere {sorted(elsewhere)}, "
                    f"no report from {unanswered}"
                )
            time.sleep(POLL_S)


class SkewedLoad:
    """Producers and consumers on one topic per bundle of `namespace`, at `rates` msg/s each.

    Made, it has found its topics (`by_bundle`: bundle range -> topic; `topics`, in bundle order);
    `start()` connects the clients and starts sending, so that a placement can be made first.
    """

    def __init__(self, admin_url: str, service_url: str, namespace: str, rates: Sequence[float],
                 size: int = 1000) -> None:
        self.namespace = namespace
        self.service_url = service_url
        self.rates = list(rates)
        self.size = size
        self.by_bundle = topics_by_bundle(admin_url, namespace, len(self.rates))
        self.topics = [self.by_bundle[b] for b in sorted(self.by_bundle)]
        self._lock = threading.Lock()
        self.sent = 0  # send_async called
        self.acked = 0  # acknowledged by a broker
        self.failed = 0  # send failed (no ack): not in, so not expected out
        self._received: set[bytes] = set()
        self.duplicates = 0
        self._client: Any = None
        self._consumers: list[Any] = []
        self._producers: list[Any] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _connect(self) -> None:
        import pulsar

        self._client = pulsar.Client(self.service_url, operation_timeout_seconds=60,
                                     logger=logging.getLogger("pulsar.client"))
        logging.getLogger("pulsar.client").setLevel(logging.ERROR)
        urls = [f"persistent://{self.namespace}/{t}" for t in self.topics]
        listener = self._on_message
        self._consumers = [self._client.subscribe(url, "load", message_listener=listener) for url in urls]
        self._producers = [
            self._client.create_producer(url, batching_enabled=True,
                                         batching_max_publish_delay_ms=5, send_timeout_millis=120_000,
                                         block_if_queue_full=True)
            for url in urls
        ]

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
        """Connect a consumer and a producer to every topic, then send."""
        self._connect()
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
        if self._client is not None:
            self._client.close()
