"""A fake Pulsar admin API on loopback for the live watch's unit tests: one HTTP server per broker.

Each broker answers what `rebalancer.shedding.live` asks of a real one, in Pulsar's shapes: the
cluster list, the active brokers, its own `LocalBrokerData` (with `lastStats`), its runtime
configuration, and bundle unloads (a PUT at a broker that does not own the bundle is redirected to
the owner with a 307, as Pulsar redirects). Faults are queued per broker and path: an HTML page,
truncated JSON, an HTTP 500 with Pulsar's `{"reason": ...}`, a 404, or an unload that fails after it
moved the bundle (a timeout's ambiguity). Every request is kept, headers included, for the tests
that check where the token went.
"""

from __future__ import annotations

import json
import threading
import urllib.parse
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

RATES = ("msgRateIn", "msgRateOut", "msgThroughputIn", "msgThroughputOut")


@dataclass
class Request:
    broker: str
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]


@dataclass
class FakeBroker:
    """One broker's state: usages as (usage, limit), the bundles it owns in report order, their rates."""

    server: ThreadingHTTPServer
    thread: threading.Thread
    cpu: tuple[float, float] = (100.0, 800.0)
    memory: tuple[float, float] = (1024.0, 8192.0)
    direct_memory: tuple[float, float] = (0.0, 4096.0)
    bandwidth_in: tuple[float, float] = (0.0, 100_000.0)
    bandwidth_out: tuple[float, float] = (0.0, 100_000.0)
    bundles: list[str] = field(default_factory=list)
    runtime: dict[str, str] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return f"127.0.0.1:{self.server.server_address[1]}"

    @property
    def url(self) -> str:
        return f"http://{self.id}"


class FakePulsar:
    """`brokers` fake brokers of cluster `cluster`; `admin_url` is the first one's."""

    def __init__(self, brokers: int = 2, cluster: str = "fake", clusters: list[str] | None = None) -> None:
        self.cluster = cluster
        self.clusters = [cluster] if clusters is None else clusters
        self.stats: dict[str, dict[str, float]] = {}  # bundle -> its rates (whoever owns it)
        self.requests: list[Request] = []
        self.faults: dict[tuple[str, str], deque[str]] = {}  # (broker id, path prefix) -> fault kinds
        self.unlisted: set[str] = set()  # brokers left out of the broker list
        self.lock = threading.Lock()
        self.brokers: list[FakeBroker] = []
        for _ in range(brokers):
            server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
            server.daemon_threads = True
            thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
            thread.start()
            self.brokers.append(FakeBroker(server, thread, runtime={
                "loadBalancerSheddingEnabled": "false",
                "loadManagerClassName": "org.apache.pulsar.broker.loadbalance.impl.ModularLoadManagerImpl",
                "brokerClientAuthenticationParameters": "token:do-not-show-this",
            }))

    @property
    def admin_url(self) -> str:
        return self.brokers[0].url

    def broker(self, broker_id: str) -> FakeBroker:
        return next(b for b in self.brokers if b.id == broker_id)

    def owner(self, bundle: str) -> FakeBroker | None:
        return next((b for b in self.brokers if bundle in b.bundles), None)

    def put_bundle(self, index: int, bundle: str, rate_in: float, rate_out: float = 0.0, size: float = 1000.0) -> None:
        """`bundle` owned by broker `index`, with these rates (throughput = rate x size)."""
        for b in self.brokers:
            if bundle in b.bundles:
                b.bundles.remove(bundle)
        self.brokers[index].bundles.append(bundle)
        self.stats[bundle] = {"msgRateIn": rate_in, "msgRateOut": rate_out, "msgThroughputIn": rate_in * size,
                              "msgThroughputOut": rate_out * size}

    def fault(self, index: int, path: str, *kinds: str) -> None:
        """The next requests to broker `index` whose path starts with `path` answer with these faults."""
        self.faults.setdefault((self.brokers[index].id, path), deque()).extend(kinds)

    def stop(self, index: int) -> None:
        """The broker's server goes away: connections are refused (a killed broker)."""
        broker = self.brokers[index]
        broker.server.shutdown()
        broker.server.server_close()

    def close(self) -> None:
        for broker in self.brokers:
            broker.server.shutdown()
            broker.server.server_close()

    def __enter__(self) -> FakePulsar:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def load_report(self, broker: FakeBroker) -> dict[str, object]:
        last_stats = {b: {**self.stats[b], "consumerCount": 1, "producerCount": 1, "topics": 2, "cacheSize": 0}
                      for b in broker.bundles if b in self.stats}
        totals = {r: sum(self.stats[b][r] for b in broker.bundles if b in self.stats) for r in RATES}
        usage = {"cpu": broker.cpu, "memory": broker.memory, "directMemory": broker.direct_memory,
                 "bandwidthIn": broker.bandwidth_in, "bandwidthOut": broker.bandwidth_out}
        return {
            "webServiceUrl": broker.url,
            "pulsarServiceUrl": f"pulsar://127.0.0.1:{broker.server.server_address[1] + 1}",
            **{name: {"usage": u, "limit": limit} for name, (u, limit) in usage.items()},
            **totals,
            "lastUpdate": 1_700_000_000_000,
            "lastStats": last_stats,
            "numTopics": 2 * len(last_stats),
            "numBundles": len(last_stats),
            "bundles": list(broker.bundles),
            "lastBundleGains": [],
            "lastBundleLosses": [],
            "brokerVersionString": "4.2.4",
            "loadReportType": "LocalBrokerData",
        }


def _handler(fake: FakePulsar) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:  # quiet
            return

        def _me(self) -> FakeBroker:
            port = self.server.server_address[1]
            return next(b for b in fake.brokers if b.server.server_address[1] == port)

        def _send(self, status: int, body: bytes = b"", kind: str = "application/json",
                  headers: dict[str, str] | None = None) -> None:
            self.send_response(status)
            if body:
                self.send_header("Content-Type", kind)
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            # No keep-alive: a stopped broker must refuse the next request, not serve it on an old connection.
            self.send_header("Connection", "close")
            self.close_connection = True
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _fault(self, me: FakeBroker, path: str) -> str | None:
            with fake.lock:
                for (broker, prefix), kinds in fake.faults.items():
                    if broker == me.id and path.startswith(prefix) and kinds:
                        return kinds.popleft()
            return None

        def _answer_fault(self, kind: str) -> bool:
            if kind == "html":
                self._send(200, b"<html><body>Login</body></html>", "text/html")
            elif kind == "truncated":
                self._send(200, b'{"cpu": {"usage": 1.0, "limit"')
            elif kind == "500":
                self._send(500, json.dumps({"reason": "Internal error: boom"}).encode())
            elif kind == "404":
                self._send(404, json.dumps({"reason": "Not found"}).encode())
            else:
                return False
            return True

        def _handle(self, method: str) -> None:
            me = self._me()
            url = urllib.parse.urlsplit(self.path)
            query = dict(urllib.parse.parse_qsl(url.query))
            fake.requests.append(Request(me.id, method, url.path, query, dict(self.headers.items())))
            fault = self._fault(me, url.path)
            if fault is not None and fault != "move-then-500" and self._answer_fault(fault):
                return
            path = url.path
            if method == "GET" and path == "/admin/v2/clusters":
                self._send(200, json.dumps(fake.clusters).encode())
            elif method == "GET" and path == f"/admin/v2/brokers/{fake.cluster}":
                listed = [b.id for b in fake.brokers if b.id not in fake.unlisted]
                self._send(200, json.dumps(listed).encode())
            elif method == "GET" and path == "/admin/v2/broker-stats/load-report":
                self._send(200, json.dumps(fake.load_report(me)).encode())
            elif method == "GET" and path == "/admin/v2/brokers/configuration/runtime":
                self._send(200, json.dumps(me.runtime).encode())
            elif method == "PUT" and path.startswith("/admin/v2/namespaces/") and path.endswith("/unload"):
                self._unload(me, path, query, fault)
            else:
                self._send(404, b"<html>no such page</html>", "text/html")

        def _unload(self, me: FakeBroker, path: str, query: dict[str, str], fault: str | None) -> None:
            tenant, namespace, bundle_range = [urllib.parse.unquote(p) for p in path.split("/")[4:7]]
            bundle = f"{tenant}/{namespace}/{bundle_range}"
            owner = fake.owner(bundle)
            if owner is None:
                self._send(404, json.dumps({"reason": f"bundle {bundle} is not owned"}).encode())
                return
            if owner is not me:  # Pulsar redirects to the owner
                location = f"{owner.url}{self.path}"
                self._send(307, headers={"Location": location})
                return
            destination = query.get("destinationBroker")
            if destination is not None:
                index = [b.id for b in fake.brokers].index(destination)
                with fake.lock:
                    owner.bundles.remove(bundle)
                    fake.brokers[index].bundles.append(bundle)
            if fault == "move-then-500":
                self._send(500, json.dumps({"reason": "timed out"}).encode())
                return
            self._send(204)

        def do_GET(self) -> None:
            self._handle("GET")

        def do_PUT(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)
            self._handle("PUT")

    return Handler
