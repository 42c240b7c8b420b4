"""The shedders on a running Apache Pulsar cluster: watched live, recorded, and (on request) acted on.

`SheddingWatch` polls the admin REST API of a cluster whose brokers run the modular load manager
(`ModularLoadManagerImpl`, whose strategies `rebalancer.shedding` ports), every `interval_s`:

- `GET /admin/v2/clusters` once, for the cluster's name (unless given);
- `GET /admin/v2/brokers/{cluster}`: the active brokers, by id (`host:port`);
- `GET /admin/v2/broker-stats/load-report` on each broker: its `LocalBrokerData` (usages, rates,
  the bundles it owns and `lastStats`, each bundle's rates).

From them it builds what Pulsar's leader builds: each bundle's `BundleData`, the short- and long-term
averages of its rates (`TimeAverageMessageData`, 10 and 1,000 samples, here one sample per poll), so
each cycle is the same `Snapshot`/`ClusterLoad` that `shedding replay` reads. Every strategy is one
object for the whole watch, so its state (hit counts, plans, history) carries from cycle to cycle as
in a leader broker; it sees the bundles the watch unloaded within the grace period as Pulsar's
strategies see the leader's `recentlyUnloadedBundles`.

`record`: each snapshot is written as one JSON file (`snapshot-NNNNNN.json`, written whole, then
renamed, so an interrupted watch leaves only complete files) that `reports.load_reports`, `shedding
replay` and `shedding compare --reports` read; beside them, `decisions.jsonl` holds one line per
cycle with each strategy's decisions and what was applied.

`apply`: unloads the chosen strategy's bundles to the broker it planned (`PUT .../{bundle}/unload
?destinationBroker=...`). It refuses to start, or to go on, while any broker runs its own shedding
(`loadBalancerSheddingEnabled=true`): two load managers would fight. Rules:

- a bundle unloaded by the watch is not unloaded again within the strategy's grace period
  (`ShedderConfig.shedding_grace_period_minutes`, Pulsar's `loadBalancerSheddingGracePeriodMinutes`);
- a failed unload is reported and retried once, at the next cycle, to the same broker, if the bundle
  is still on the broker it was to leave and that destination is still active; a second failure (or
  a retry whose conditions no longer hold) is reported as given up. A bundle found on its planned
  broker at the retry was unloaded after all (an unload that timed out) and counts as done;
- bundles of a broker's heartbeat namespace stay where they are (Pulsar pins them to their broker).

Every action is logged (INFO), every failure a WARNING, and each cycle's `Cycle.applied` lists them all.

Brokers that share one host (a test cluster on loopback) all report the host's CPU and NIC readings,
so their usages cannot differ. `bandwidth_from_throughput=True` takes each broker's own throughput
(`msgThroughputIn`/`Out`, bytes/s, as kbit/s) as its bandwidth usage against the reported NIC limit:
the usage a broker would report on a NIC of its own. Snapshots keep those numbers, so a replay of the
recording sees what the strategies saw.

Bad answers (an HTML page, truncated JSON, HTTP 500, a broker gone between two calls) cost one
WARNING each, and the cycle goes on without that data; a broker that stops answering is reported
once, until it answers again. Only the first contact (`connect`) raises: `AdminUnreachableError`
(a `ConnectionError`) when nothing answers, `AdminResponseError` (a `ValueError`) when what answers
is not Pulsar's admin API.

Secrets (the token, a password in the URL) appear in no log, error, repr or recording: the token
travels in the `Authorization` header only, and every URL shown is masked (`rebalancer._secrets`).
"""

from __future__ import annotations

import json
import logging
import os
import re
import ssl
import time
import urllib.parse
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, NamedTuple

from rebalancer._extras import require_extra
from rebalancer._numbers import shown
from rebalancer._secrets import masked_repr, masked_text, masked_url
from rebalancer.balance.checks import is_int, is_real
from rebalancer.shedding.base import LoadSheddingStrategy, PlacementStrategy
from rebalancer.shedding.model import PROPERTY_NAMES, BrokerLoad, BundleLoad, ClusterLoad, ShedderConfig
from rebalancer.shedding.pulsar.shared import local_usage
from rebalancer.shedding.reports import Snapshot, parse_broker, parse_bundle
from rebalancer.shedding.sim import combination

require_extra("rebalancer.shedding.live", "pulsar", ("httpx",))

import httpx  # noqa: E402 - after the check that names the extra

__all__ = [
    "CLUSTER_SETTINGS",
    "DECISIONS_FILE",
    "DEFAULT_STRATEGIES",
    "Action",
    "AdminOptions",
    "AdminResponseError",
    "AdminUnreachableError",
    "Cycle",
    "Move",
    "SheddingEnabledError",
    "SheddingWatch",
    "read_decisions",
    "strategy_name",
]

log = logging.getLogger(__name__)

DEFAULT_STRATEGIES = ("AvgShedder", "BalancedShedder")
# `config=CLUSTER_SETTINGS`: the strategies run with the cluster's own loadBalancer* settings.
CLUSTER_SETTINGS = "cluster"
DECISIONS_FILE = "decisions.jsonl"
MODULAR_LOAD_MANAGER = "org.apache.pulsar.broker.loadbalance.impl.ModularLoadManagerImpl"
# The leader's TimeAverageMessageData sizes (ModularLoadManagerImpl.NUM_SHORT_SAMPLES, NUM_LONG_SAMPLES).
SHORT_SAMPLES = 10
LONG_SAMPLES = 1000

_RESOURCES = ("cpu", "memory", "directMemory", "bandwidthIn", "bandwidthOut")
_RATES = ("msgRateIn", "msgRateOut", "msgThroughputIn", "msgThroughputOut")
_SNAPSHOT = re.compile(r"snapshot-(\d+)\.json")
# Namespaces Pulsar keeps on one broker (NamespaceService's heartbeat and SLA-monitor patterns).
_PINNED = re.compile(r"(pulsar|sla-monitor)/([^/]+/)?[^/:]+:\d+")
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_MAX_REDIRECTS = 5
_SHOWN_BODY = 160  # characters of an error's reason shown


class AdminUnreachableError(ConnectionError):
    """Nothing answered the admin API (refused, timed out, TLS failed)."""


class AdminResponseError(ValueError):
    """The admin API answered, but not with what Pulsar answers: an error status, HTML, broken JSON."""


class SheddingEnabledError(ValueError):
    """`apply` refused: a broker runs its own load shedding, and two load managers would fight."""


@dataclass(frozen=True)
class AdminOptions:
    """How to reach the admin API: a token (sent as `Authorization: Bearer`), TLS files, a timeout.

    `ca_file` verifies the brokers' certificates (the system's CAs otherwise); `cert_file` and
    `key_file` are a client certificate (mutual TLS); `verify=False` skips verification (a warning
    says so). The token is never shown: the repr prints it as ***.
    """

    token: str | None = field(default=None, repr=False)
    ca_file: str | os.PathLike[str] | None = None
    cert_file: str | os.PathLike[str] | None = None
    key_file: str | os.PathLike[str] | None = None
    verify: bool = True
    timeout_s: float = 10.0

    def __post_init__(self) -> None:
        if self.token is not None and (not isinstance(self.token, str) or not self.token.strip()):
            raise ValueError(f"token must be a non-empty str or None, got {shown(self.token, secret=True)}")
        if self.token is not None and any(c in self.token for c in "\r\n"):
            raise ValueError("token must be one line (a newline would end the Authorization header)")
        for name in ("ca_file", "cert_file", "key_file"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str | os.PathLike):
                raise ValueError(f"{name} must be a path or None, got {shown(value)}")
        if self.key_file is not None and self.cert_file is None:
            raise ValueError("key_file needs cert_file (the client certificate it belongs to)")
        if not isinstance(self.verify, bool):
            raise ValueError(f"verify must be True or False, got {shown(self.verify)}")
        if not is_real(self.timeout_s) or not 0 < self.timeout_s <= 3600:
            raise ValueError(f"timeout_s must be a number > 0 and <= 3600, got {shown(self.timeout_s)}")

    def __repr__(self) -> str:
        return masked_repr(self, token=None if self.token is None else "***")

    def ssl_context(self) -> ssl.SSLContext:
        """The TLS settings as one context; an unreadable file is a ValueError naming the option."""
        ca_file = None if self.ca_file is None else os.fspath(self.ca_file)
        try:
            context = ssl.create_default_context(cafile=ca_file)
        except (OSError, ssl.SSLError) as err:
            raise ValueError(f"ca_file {ca_file!r}: cannot load CA certificates: {_reason(err)}") from None
        if self.cert_file is not None:
            key = None if self.key_file is None else os.fspath(self.key_file)
            try:
                context.load_cert_chain(os.fspath(self.cert_file), key)
            except (OSError, ssl.SSLError) as err:
                raise ValueError(
                    f"cert_file {os.fspath(self.cert_file)!r}: cannot load the client certificate: {_reason(err)}"
                ) from None
        if not self.verify:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        return context


def _reason(err: BaseException) -> str:
    """An exception's own words, URLs masked; never a certificate's or a key's content."""
    if isinstance(err, OSError) and err.strerror:
        return err.strerror
    return masked_text(str(err)) or type(err).__name__


class Move(NamedTuple):
    """One decision: unload `bundle` from `source` and place it on `destination`."""

    bundle: str
    source: str
    destination: str


@dataclass(frozen=True)
class Action:
    """What `apply` did with one move: `outcome` is "unloaded", "failed" (retried next cycle),
    "gave up" (after the retry) or "skipped"; `reason` says why for all but "unloaded"."""

    move: Move
    outcome: Literal["unloaded", "failed", "gave up", "skipped"]
    reason: str = ""
    retry: bool = False

    def to_json(self) -> dict[str, object]:
        return {"bundle": self.move.bundle, "source": self.move.source, "destination": self.move.destination,
                "outcome": self.outcome, "reason": self.reason, "retry": self.retry}


@dataclass(frozen=True)
class Cycle:
    """One poll: what the cluster looked like, what each strategy would unload, what was applied.

    `snapshot` is None when no broker's load report could be read (then nothing was decided or
    recorded). `usage` is each broker's load-manager usage in percent (the weighted max of cpu,
    direct memory and bandwidth that the modular strategies compare), `spread` its max - min.
    `unloads` is each shedder's raw choice (bundle, source), `decisions` the moves with the broker
    its placement chose (a bundle whose placement found no other broker is in `unloads` only).
    """

    index: int
    timestamp: float
    brokers: tuple[str, ...]
    snapshot: Snapshot | None
    usage: Mapping[str, float]
    decisions: Mapping[str, tuple[Move, ...]]
    unloads: Mapping[str, tuple[tuple[str, str], ...]]
    applied: tuple[Action, ...] = ()
    warnings: tuple[str, ...] = ()
    path: Path | None = None

    @property
    def spread(self) -> float:
        return max(self.usage.values()) - min(self.usage.values()) if self.usage else 0.0


def strategy_name(name: str) -> str:
    """The short name a strategy is known by in decisions (`BalancedShedder`, `ThresholdShedder`)."""
    return combination(name).name.split(" ")[0].split("+")[0]


@dataclass
class _Runner:
    """One strategy for the whole watch: its shedder and placement objects keep their state."""

    name: str
    conf: ShedderConfig
    shedder: LoadSheddingStrategy
    placer: PlacementStrategy
    active: frozenset[str] | None = None

    def decide(self, cluster: ClusterLoad) -> tuple[list[tuple[str, str]], list[Move]]:
        active = frozenset(cluster.brokers)
        if self.active is not None and active != self.active:
            for strategy in {id(s): s for s in (self.shedder, self.placer)}.values():
                strategy.on_active_brokers_change(set(active))
        self.active = active
        chosen = self.shedder.find_bundles_for_unloading(cluster, self.conf)
        unloads: list[tuple[str, str]] = []
        moves: list[Move] = []
        for source, bundles in chosen.items():
            for bundle in bundles:
                unloads.append((bundle, source))
                destination = self.placer.select_broker(set(cluster.brokers), bundle, cluster, self.conf)
                if destination is None or destination == source:
                    log.info("%s: %s stays on %s: no other broker for it", self.name, bundle, source)
                    continue
                moves.append(Move(bundle, source, destination))
        return unloads, moves


class _Average:
    """Pulsar's `TimeAverageMessageData`: a running mean over at most `max_samples` samples."""

    __slots__ = ("max_samples", "samples", "values")

    def __init__(self, max_samples: int) -> None:
        self.max_samples = max_samples
        self.samples = 0
        self.values = dict.fromkeys(_RATES, 0.0)

    def update(self, sample: Mapping[str, float]) -> None:
        self.samples = min(self.samples + 1, self.max_samples)
        n = self.samples
        for key in _RATES:  # n == 1 takes the sample as it is (Pulsar's defaults are ignored)
            self.values[key] = ((n - 1) * self.values[key] + sample[key]) / n

    def to_json(self) -> dict[str, float | int]:
        return {"maxSamples": self.max_samples, "numSamples": self.samples, **self.values}


@dataclass
class _Report:
    """One broker's usable load report: what a snapshot file keeps of it, and its bundles' stats."""

    entry: dict[str, Any]
    stats: dict[str, dict[str, float]]
    topics: dict[str, int]
    web_url: str | None


class _Admin:
    """The HTTP side: one connection pool, the token in a header, redirects only to the cluster's hosts."""

    def __init__(self, admin_url: str, options: AdminOptions) -> None:
        self.base = admin_url.rstrip("/")
        self.options = options
        self.hosts = {urllib.parse.urlsplit(self.base).hostname or ""}
        headers = {"Accept": "application/json"}
        if options.token is not None:
            headers["Authorization"] = f"Bearer {options.token}"
        self._client = httpx.Client(
            headers=headers, timeout=options.timeout_s, verify=options.ssl_context(), follow_redirects=False
        )

    def close(self) -> None:
        self._client.close()

    def request(self, method: str, url: str, what: str, params: Mapping[str, str] | None = None) -> httpx.Response:
        """One call, following Pulsar's redirects (to the owner or the leader broker) within the cluster."""
        for _ in range(_MAX_REDIRECTS + 1):
            try:
                response = self._client.request(method, url, params=params)
            except httpx.TimeoutException:
                raise AdminUnreachableError(f"{what}: no answer within {self.options.timeout_s:g} s") from None
            except httpx.HTTPError as err:
                raise AdminUnreachableError(f"{what}: cannot connect: {_transport_reason(err)}") from None
            if response.status_code not in _REDIRECTS or "location" not in response.headers:
                return response
            target = response.url.join(response.headers["location"])
            if not self._may_follow(response.url, target):
                raise AdminResponseError(f"{what}: redirected outside the cluster, to {masked_url(str(target))}")
            url, params = str(target), None  # Pulsar's Location keeps the query
        raise AdminResponseError(f"{what}: more than {_MAX_REDIRECTS} redirects")

    def _may_follow(self, origin: httpx.URL, target: httpx.URL) -> bool:
        """The token goes only to this cluster's hosts, and never from https down to http."""
        if target.scheme not in ("http", "https") or (origin.scheme == "https" and target.scheme == "http"):
            return False
        return target.host in self.hosts

    def get_json(self, url: str, what: str) -> object:
        return _json(self.request("GET", url, what), what)


def _transport_reason(err: httpx.HTTPError) -> str:
    cause: BaseException | None = err
    while cause is not None:  # the OS's words (Connection refused) are on the innermost OSError
        if isinstance(cause, OSError) and cause.strerror:
            return cause.strerror
        cause = cause.__cause__ or cause.__context__
    return masked_text(str(err)) or type(err).__name__


def _json(response: httpx.Response, what: str) -> object:
    """The answer's JSON; anything else is an AdminResponseError saying what came instead."""
    status = response.status_code
    body = response.content
    kind = response.headers.get("content-type", "").split(";")[0].strip() or "no content type"
    if status >= 300:
        raise AdminResponseError(f"{what}: HTTP {status}{_error_reason(body, kind)}")
    try:
        return json.loads(body)
    except RecursionError:
        raise AdminResponseError(f"{what}: JSON nested too deeply ({len(body)} bytes)") from None
    except ValueError as err:
        if body.lstrip()[:1] == b"<" or "html" in kind:
            raise AdminResponseError(f"{what}: an HTML page ({kind}), not JSON") from None
        detail = err.msg if isinstance(err, json.JSONDecodeError) else "not UTF-8 text"
        where = f" at byte {err.pos} of {len(body)}" if isinstance(err, json.JSONDecodeError) else ""
        raise AdminResponseError(f"{what}: truncated or malformed JSON ({detail}{where})") from None


def _error_reason(body: bytes, kind: str) -> str:
    """Pulsar's `{"reason": ...}`, shortened and masked; an HTML page is named, not quoted."""
    if not body.strip():
        return ""
    if body.lstrip()[:1] == b"<" or "html" in kind:
        return f" (an HTML page, {kind})"
    try:
        data = json.loads(body)
    except ValueError:
        return ""
    reason = data.get("reason") if isinstance(data, dict) else None
    if not isinstance(reason, str) or not reason.strip():
        return ""
    text = " ".join(masked_text(reason).split())
    return f": {text[:_SHOWN_BODY]}{'…' if len(text) > _SHOWN_BODY else ''}"


def _check_admin_url(admin_url: object) -> str:
    if not isinstance(admin_url, str):
        raise ValueError(f"admin_url must be an http:// or https:// URL, got {shown(admin_url)}")
    try:
        parts = urllib.parse.urlsplit(admin_url)
        parts.port  # noqa: B018 - raises on a port that is no number
    except ValueError:
        raise ValueError(f"admin_url is not a URL: {masked_url(admin_url)!r}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"admin_url must be an http:// or https:// URL with a host, got {masked_url(admin_url)!r}")
    if parts.query or parts.fragment:
        raise ValueError(f"admin_url takes no query or fragment, got {masked_url(admin_url)!r}")
    return admin_url


def _strategy_names(strategies: str | Sequence[str], apply: str | None) -> list[str]:
    names = strategies.split(",") if isinstance(strategies, str) else list(strategies)
    if not all(isinstance(n, str) for n in names):
        raise ValueError(f"strategies must be strategy names, got {shown(strategies)}")
    names = [n.strip() for n in names if n.strip()]
    if not names:
        raise ValueError(f"strategies must name at least one strategy, got {shown(strategies)}")
    short = [strategy_name(n) for n in names]  # ValueError for an unknown name lists the known ones
    if len(set(short)) != len(short):
        raise ValueError(f"strategies names one strategy twice: {', '.join(short)}")
    if apply is not None:
        if not isinstance(apply, str):
            raise ValueError(f"apply must be a strategy name or None, got {shown(apply)}")
        applied = strategy_name(apply)
        if applied not in short:
            short.append(applied)  # the strategy acted on is watched too
    return short


def _pinned(bundle: str) -> bool:
    return _PINNED.fullmatch(bundle.rpartition("/")[0]) is not None


def _unload_path(bundle: str) -> str:
    """`tenant/ns/range` (v2) or `tenant/cluster/ns/range` (v1) as its unload endpoint."""
    parts = [urllib.parse.quote(p, safe="") for p in bundle.split("/")]
    if len(parts) == 3:
        return "/admin/v2/namespaces/{}/{}/{}/unload".format(*parts)
    if len(parts) == 4:
        return "/admin/namespaces/{}/{}/{}/{}/unload".format(*parts)
    raise ValueError(f"bundle {bundle!r} is not tenant/namespace/range")


class SheddingWatch:
    """Watch a Pulsar cluster through its admin API; see the module docstring.

    `strategies`: names as `shedding simulate --strategy` takes them (a list, or one comma-separated
    str). `config`: the settings every strategy runs with; None gives each its own (those of
    `shedding compare`: AvgShedder and BalancedShedder with `max_unload_percentage=0.5`), and
    `CLUSTER_SETTINGS` reads the cluster's own `loadBalancer*` settings from a broker's runtime
    configuration at `connect`. `record`: a directory for the snapshots (created; a watch that
    finds earlier ones there numbers its own after them). `apply`: the strategy whose decisions are
    carried out (it is watched too). `bandwidth_from_throughput`: see the module docstring (brokers
    sharing a host). `clock` and `sleep` are for tests.
    """

    def __init__(
        self,
        admin_url: str,
        strategies: str | Sequence[str] = DEFAULT_STRATEGIES,
        config: ShedderConfig | str | None = None,
        *,
        interval_s: float = 60.0,
        record: str | os.PathLike[str] | None = None,
        apply: str | None = None,
        cluster: str | None = None,
        admin: AdminOptions | None = None,
        seed: int = 0,
        bandwidth_from_throughput: bool = False,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.admin_url = _check_admin_url(admin_url)
        if config is not None and not isinstance(config, ShedderConfig) and config != CLUSTER_SETTINGS:
            raise ValueError(f"config must be a ShedderConfig, {CLUSTER_SETTINGS!r} or None, got {shown(config)}")
        if not is_real(interval_s) or not 0 < interval_s <= 86_400:
            raise ValueError(f"interval_s must be a number > 0 and <= 86400, got {shown(interval_s)}")
        if record is not None and not isinstance(record, str | os.PathLike):
            raise ValueError(f"record must be a directory path or None, got {shown(record)}")
        if cluster is not None and (not isinstance(cluster, str) or not cluster or "/" in cluster):
            raise ValueError(f"cluster must be a cluster name or None, got {shown(cluster)}")
        if admin is not None and not isinstance(admin, AdminOptions):
            raise ValueError(f"admin must be an AdminOptions or None, got {shown(admin)}")
        if not is_int(seed):
            raise ValueError(f"seed must be an int, got {shown(seed)}")
        if not isinstance(bandwidth_from_throughput, bool):
            raise ValueError(f"bandwidth_from_throughput must be True or False, got {shown(bandwidth_from_throughput)}")
        self.bandwidth_from_throughput = bandwidth_from_throughput
        if admin is not None and admin.token is not None and urllib.parse.urlsplit(admin_url).username is not None:
            raise ValueError(
                f"admin_url holds a user ({masked_url(admin_url)!r}) and a token is given: use one of them"
            )
        self.strategies = _strategy_names(strategies, apply)
        self.apply = None if apply is None else strategy_name(apply)
        self.config = config
        self.interval_s = float(interval_s)
        self.record = None if record is None else Path(record)
        if self.record is not None and self.record.exists() and not self.record.is_dir():
            raise ValueError(f"record must be a directory, got the file {str(self.record)!r}")
        self.cluster = cluster
        self.seed = int(seed)
        self._options = admin or AdminOptions()
        self._clock = clock
        self._sleep = sleep
        self._admin: _Admin | None = None
        self._runners: list[_Runner] = []
        self._usage_conf = config if isinstance(config, ShedderConfig) else ShedderConfig()
        self._brokers: list[str] = []  # the last broker list read
        self._web_urls: dict[str, str] = {}  # broker -> its web address, from its report
        self._down: set[str] = set()  # brokers (or admin addresses) reported unreachable
        self._short: dict[str, _Average] = {}
        self._long: dict[str, _Average] = {}
        self._topics: dict[str, int] = {}
        self._owner: dict[str, str] = {}  # bundle -> the broker that last reported it
        self._unloaded_at: dict[str, float] = {}  # bundle -> when the watch unloaded it (seconds)
        self._retry: dict[str, Move] = {}  # failed unloads to retry at the next cycle
        self._live_base = ""  # the admin address that answered this cycle: unloads go there
        self._cycle = 0
        self._next_file = 0
        self._warnings: list[str] = []

    def __repr__(self) -> str:
        return (
            f"SheddingWatch(admin_url={masked_url(self.admin_url)!r}, strategies={self.strategies!r}, "
            f"interval_s={self.interval_s:g}, record={None if self.record is None else str(self.record)!r}, "
            f"apply={self.apply!r}, cluster={self.cluster!r}, admin={self._options!r})"
        )

    # -- set-up ------------------------------------------------------------------------------------

    def connect(self) -> str:
        """Reach the admin API, learn the cluster's name and brokers, set the strategies up; the
        cluster's name. Raises AdminUnreachableError, AdminResponseError (a wrong URL, a refused
        token) or SheddingEnabledError (with `apply`)."""
        if self._admin is not None:
            assert self.cluster is not None
            return self.cluster
        shown_url = masked_url(self.admin_url)
        admin = _Admin(self.admin_url, self._options)
        try:
            if self._options.token is not None and urllib.parse.urlsplit(self.admin_url).scheme == "http":
                log.warning("the admin token goes to %s over plain http", shown_url)
            if not self._options.verify:
                log.warning("TLS certificates of %s are not verified (verify=False)", shown_url)
            cluster = self.cluster or self._cluster_name(admin, shown_url)
            brokers = self._list_brokers(admin, admin.base, cluster, f"admin_url {shown_url!r}")
            if not brokers:
                raise AdminResponseError(f"admin_url {shown_url!r}: cluster {cluster!r} lists no active broker")
            admin.hosts.update(urllib.parse.urlsplit(f"//{b}").hostname or "" for b in brokers)
            conf = self.config
            if conf == CLUSTER_SETTINGS or self.apply is not None:
                runtime = self._runtime_config(admin, brokers[0], f"admin_url {shown_url!r}")
                manager = runtime.get("loadManagerClassName", MODULAR_LOAD_MANAGER)
                if manager != MODULAR_LOAD_MANAGER:
                    raise AdminResponseError(
                        f"cluster {cluster!r} runs {manager}; the watch reads the reports of {MODULAR_LOAD_MANAGER}"
                    )
                if conf == CLUSTER_SETTINGS:
                    conf = _cluster_config(runtime)
            if self.apply is not None:
                self._refuse_if_shedding(admin, brokers)
        except BaseException:
            admin.close()
            raise
        self._admin, self.cluster, self._brokers = admin, cluster, brokers
        if isinstance(conf, ShedderConfig):
            self._usage_conf = conf
        for name in self.strategies:
            combo = combination(name)
            shedder, placer = combo.make(self.seed)
            run_conf = conf if isinstance(conf, ShedderConfig) else combo.conf
            self._runners.append(_Runner(name, run_conf, shedder, placer))
        if self.record is not None:
            self.record.mkdir(parents=True, exist_ok=True)
            numbers = [int(m[1]) for p in self.record.glob("snapshot-*.json") if (m := _SNAPSHOT.fullmatch(p.name))]
            self._next_file = max(numbers, default=-1) + 1
        log.info("watching cluster %r at %s: %d brokers; strategies %s", cluster, shown_url, len(brokers),
                 ", ".join(self.strategies))
        return cluster

    def _cluster_name(self, admin: _Admin, shown_url: str) -> str:
        what = f"admin_url {shown_url!r}: GET /admin/v2/clusters"
        try:
            names = admin.get_json(f"{admin.base}/admin/v2/clusters", what)
        except AdminResponseError as err:
            raise AdminResponseError(f"{err} (is it a Pulsar broker's admin API?)") from None
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise AdminResponseError(f"{what}: expected a list of cluster names, got {shown(names)}")
        local = [n for n in names if n != "global"]
        if len(local) != 1:
            raise AdminResponseError(
                f"{what}: {len(local)} clusters ({', '.join(local) or 'none'}); name the one to watch (cluster=)"
            )
        return local[0]

    def _list_brokers(self, admin: _Admin, base: str, cluster: str, where: str) -> list[str]:
        what = f"{where}: GET /admin/v2/brokers/{cluster}"
        names = admin.get_json(f"{base}/admin/v2/brokers/{urllib.parse.quote(cluster, safe='')}", what)
        if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
            raise AdminResponseError(f"{what}: expected a list of broker ids, got {shown(names)}")
        return list(names)

    def _runtime_config(self, admin: _Admin, broker: str, where: str) -> dict[str, str]:
        what = f"{where}: GET /admin/v2/brokers/configuration/runtime"
        data = admin.get_json(f"{self._broker_base(broker)}/admin/v2/brokers/configuration/runtime", what)
        if not isinstance(data, dict):
            raise AdminResponseError(f"{what}: expected the broker's settings as an object, got {type(data).__name__}")
        return {str(k): str(v) for k, v in data.items()}  # never logged: it may hold credentials

    def _refuse_if_shedding(self, admin: _Admin, brokers: Sequence[str]) -> None:
        """SheddingEnabledError if any listed broker sheds by itself; AdminResponseError if one cannot tell."""
        for broker in brokers:
            runtime = self._runtime_config(admin, broker, f"broker {broker}")
            if runtime.get("loadBalancerSheddingEnabled", "true").strip().lower() == "true":
                raise SheddingEnabledError(
                    f"refusing to apply {self.apply}: broker {broker} runs Pulsar's own load shedding "
                    "(loadBalancerSheddingEnabled=true) and two load managers would fight; set it to false "
                    "(pulsar-admin brokers update-dynamic-config --config loadBalancerSheddingEnabled --value false) "
                    "or watch without apply"
                )

    def _broker_base(self, broker: str) -> str:
        """A broker's web address: from its last report, else its id under the admin URL's scheme."""
        if broker in self._web_urls:
            return self._web_urls[broker]
        scheme = urllib.parse.urlsplit(self.admin_url).scheme
        return f"{scheme}://{broker}"

    # -- one cycle ---------------------------------------------------------------------------------

    def poll(self) -> Cycle:
        """One cycle: read the cluster, decide with every strategy, apply, record."""
        self.connect()
        admin = self._admin
        assert admin is not None
        self._warnings = []
        index = self._cycle
        self._cycle += 1
        now = self._clock()
        timestamp_ms = round(now * 1000)
        brokers = self._active_brokers(admin)
        reports = self._read_reports(admin, brokers)
        if not reports:
            self._warn("no broker's load report could be read; nothing decided or recorded this cycle")
            return Cycle(index, now, tuple(brokers), None, {}, {}, {}, warnings=tuple(self._warnings))
        snapshot, entries, bundle_json = self._snapshot(reports, brokers, timestamp_ms)
        for broker, report in reports.items():
            if report.web_url:
                self._web_urls[broker] = report.web_url
        grace = {r.name: r.conf.shedding_grace_period_minutes * 60.0 for r in self._runners}
        longest = max(grace.values())
        self._unloaded_at = {b: t for b, t in self._unloaded_at.items() if now - t < longest}
        decisions: dict[str, tuple[Move, ...]] = {}
        unloads: dict[str, tuple[tuple[str, str], ...]] = {}
        for runner in self._runners:
            recent = {b: t for b, t in self._unloaded_at.items() if now - t < grace[runner.name]}
            cluster = ClusterLoad(snapshot.brokers, snapshot.bundles, recent, snapshot.timestamp)
            raw, moves = runner.decide(cluster)
            unloads[runner.name], decisions[runner.name] = tuple(raw), tuple(moves)
        applied: list[Action] = []
        if self.apply is not None:
            applied = self._apply(admin, snapshot, decisions[self.apply], now, grace[self.apply])
        usage = {b: 100.0 * local_usage(load, self._usage_conf) for b, load in snapshot.brokers.items()}
        path = None
        if self.record is not None:
            path = self._write(index, timestamp_ms, entries, bundle_json, decisions, unloads, applied)
        return Cycle(index, snapshot.timestamp, tuple(snapshot.brokers), snapshot, usage, decisions, unloads,
                     tuple(applied), tuple(self._warnings), path)

    def run(self, cycles: int | None = None) -> Iterator[Cycle]:
        """`poll()` every `interval_s` (from the start of one cycle to the next), `cycles` times or for ever."""
        if cycles is not None and (not is_int(cycles) or cycles < 1):
            raise ValueError(f"cycles must be an int >= 1 or None, got {shown(cycles)}")
        done = 0
        next_at = self._clock()
        while cycles is None or done < cycles:
            yield self.poll()
            done += 1
            if cycles is not None and done >= cycles:
                return
            next_at = max(next_at + self.interval_s, self._clock())
            wait = next_at - self._clock()
            if wait > 0:
                self._sleep(wait)

    def _warn(self, message: str) -> None:
        log.warning("%s", message)
        self._warnings.append(message)

    def _went_down(self, key: str, message: str) -> None:
        """Report `key` unreachable once, until it answers again."""
        if key not in self._down:
            self._down.add(key)
            self._warn(message)

    def _came_back(self, key: str, what: str) -> None:
        if key in self._down:
            self._down.discard(key)
            log.info("%s answers again", what)

    def _active_brokers(self, admin: _Admin) -> list[str]:
        """The cluster's broker list from the admin URL, else from a broker it listed; else the last one.

        Addresses that refuse connections are reported once (by address: the admin URL is often a
        broker's too) until they answer again."""
        assert self.cluster is not None
        bases = [(admin.base, f"admin {masked_url(admin.base)}")]
        bases += [(self._broker_base(b), f"broker {b}") for b in self._brokers if self._broker_base(b) != admin.base]
        listed: list[str] | None = None
        for base, where in bases:
            try:
                listed = self._list_brokers(admin, base, self.cluster, where)
            except AdminUnreachableError as err:
                self._went_down(base, f"{err}; asking another broker")
                continue
            except AdminResponseError as err:
                self._warn(str(err))
                continue
            self._came_back(base, where)
            self._live_base = base
            break
        if listed is None:
            self._live_base = admin.base
            self._warn(f"no broker listed the cluster's brokers; using the last list ({len(self._brokers)})")
            return list(self._brokers)
        before = set(self._brokers)
        for broker in self._brokers:
            if broker not in listed:
                base = self._broker_base(broker)
                if base in self._down:
                    log.info("broker %s is no longer listed", broker)
                else:
                    self._warn(f"broker {broker} left the cluster (no longer listed as active)")
                self._down.discard(base)
                self._web_urls.pop(broker, None)
        for broker in listed:
            if broker not in before:
                log.info("broker %s joined the cluster", broker)
        admin.hosts.update(urllib.parse.urlsplit(f"//{b}").hostname or "" for b in listed)
        self._brokers = listed
        return listed

    def _read_reports(self, admin: _Admin, brokers: Sequence[str]) -> dict[str, _Report]:
        reports: dict[str, _Report] = {}
        for broker in brokers:
            what = f"broker {broker}: GET /admin/v2/broker-stats/load-report"
            base = self._broker_base(broker)
            try:
                data = admin.get_json(f"{base}/admin/v2/broker-stats/load-report", what)
                reports[broker] = self._parse_report(broker, data)
            except AdminUnreachableError as err:
                self._went_down(base, f"{err}; left out until it answers")
                continue
            except AdminResponseError as err:
                self._warn(f"{err}; left out of this cycle")
                continue
            self._came_back(base, f"broker {broker}")
        return reports

    def _parse_report(self, broker: str, data: object) -> _Report:
        """A LocalBrokerData checked as `load_report` checks a recorded one; a negative usage (Pulsar's
        -1 for a reading that failed) is taken as 0, with a warning."""
        where = f"broker {broker}: load report"
        if not isinstance(data, dict):
            raise AdminResponseError(f"{where}: expected a LocalBrokerData object, got {type(data).__name__}")
        entry: dict[str, Any] = {}
        for resource in _RESOURCES:
            value = data.get(resource)
            if isinstance(value, dict) and is_real(value.get("usage")) and value["usage"] < 0:
                self._warn(f"{where}: {resource} usage {value['usage']!r} (a failed reading); taken as 0")
                value = {**value, "usage": 0.0}
            if isinstance(value, dict) and "usage" in value and "limit" in value:
                value = {"usage": value["usage"], "limit": value["limit"]}  # what a recording keeps
            entry[resource] = value
        for rate in _RATES:
            entry[rate] = data.get(rate)
        entry["bundles"] = data.get("bundles")
        if "lastUpdate" in data:
            entry["lastUpdate"] = data["lastUpdate"]
        try:
            parse_broker(where, entry)
        except ValueError as err:
            raise AdminResponseError(str(err)) from None
        entry = {k: v for k, v in entry.items() if v is not None}
        if self.bandwidth_from_throughput:  # bytes/s as Pulsar's kbit/s, against the NIC limit reported
            for resource, rate in (("bandwidthIn", "msgThroughputIn"), ("bandwidthOut", "msgThroughputOut")):
                entry[resource] = {"usage": float(entry[rate]) * 8 / 1024, "limit": entry[resource]["limit"]}
        last_stats = data.get("lastStats", {})
        if not isinstance(last_stats, dict):
            raise AdminResponseError(f"{where}.lastStats must map bundles to their stats, got {shown(last_stats)}")
        stats: dict[str, dict[str, float]] = {}
        topics: dict[str, int] = {}
        for bundle, values in last_stats.items():
            if not isinstance(values, dict):
                raise AdminResponseError(f"{where}.lastStats[{bundle!r}] must be an object, got {shown(values)}")
            sample = {}
            for rate in _RATES:
                value = values.get(rate)
                if not is_real(value) or float(value) < 0:  # type: ignore[arg-type]
                    raise AdminResponseError(f"{where}.lastStats[{bundle!r}].{rate} must be a rate >= 0, got {shown(value)}")
                sample[rate] = float(value)  # type: ignore[arg-type]
            stats[bundle] = sample
            count = values.get("topics", 0)
            topics[bundle] = int(count) if is_int(count) and count >= 0 else 0
        scheme = urllib.parse.urlsplit(self.admin_url).scheme
        url = data.get("webServiceUrlTls" if scheme == "https" else "webServiceUrl")
        web_url = url.rstrip("/") if isinstance(url, str) and url.startswith(f"{scheme}://") else None
        return _Report(entry, stats, topics, web_url)

    def _snapshot(
        self, reports: Mapping[str, _Report], listed: Sequence[str], timestamp_ms: int
    ) -> tuple[Snapshot, dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
        """The cycle's snapshot, and the broker and bundle JSON a recording keeps of it.

        A bundle two reports list (it moved between the two reads) goes to the broker read last. Each
        bundle with stats gets a sample in its averages; a bundle no report has any more is forgotten,
        unless its broker is still listed but did not answer (its history waits for it, as the
        leader keeps a broker's last report until it leaves).
        """
        owner: dict[str, str] = {}
        for broker, report in reports.items():  # in reading order: later reads win
            for bundle in report.entry["bundles"]:
                if bundle in owner:
                    log.info("bundle %s is listed by %s and %s: moving; taken as %s's", bundle, owner[bundle], broker,
                             broker)
                owner[bundle] = broker
        entries: dict[str, dict[str, Any]] = {}
        for broker, report in reports.items():
            entry = dict(report.entry)
            entry["bundles"] = [b for b in report.entry["bundles"] if owner[b] == broker]
            entries[broker] = entry
        seen: set[str] = set()
        for broker, report in reports.items():
            for bundle, sample in report.stats.items():
                if owner.get(bundle, broker) != broker:
                    continue  # the newer report's stats count
                self._short.setdefault(bundle, _Average(SHORT_SAMPLES)).update(sample)
                self._long.setdefault(bundle, _Average(LONG_SAMPLES)).update(sample)
                self._topics[bundle] = report.topics.get(bundle, 0)
                self._owner[bundle] = broker
                seen.add(bundle)
        waiting = {b for b in listed if b not in reports}
        for bundle in list(self._short):
            if bundle not in seen and self._owner.get(bundle) not in waiting:
                for table in (self._short, self._long, self._topics, self._owner):
                    table.pop(bundle, None)
        bundle_json = {
            b: {"shortTermData": self._short[b].to_json(), "longTermData": self._long[b].to_json(),
                "topics": self._topics.get(b, 0)}
            for b in sorted(seen)
        }
        brokers: dict[str, BrokerLoad] = {}
        limits: dict[str, dict[str, float]] = {}
        for broker, entry in entries.items():
            brokers[broker], limits[broker], _ = parse_broker(f"broker {broker}", entry)
        bundles: dict[str, BundleLoad] = {b: parse_bundle(f"bundle {b}", d) for b, d in bundle_json.items()}
        return Snapshot(timestamp_ms / 1000.0, brokers, bundles, limits), entries, bundle_json

    # -- acting ------------------------------------------------------------------------------------

    def _apply(
        self, admin: _Admin, snapshot: Snapshot, moves: Sequence[Move], now: float, grace_s: float
    ) -> list[Action]:
        """Carry out `moves` (and last cycle's failed unloads, once more) under the rules of the module docstring."""
        cluster = snapshot.cluster()
        active = set(snapshot.brokers)
        actions: list[Action] = []
        try:
            self._refuse_if_shedding(admin, sorted(active))
        except (AdminUnreachableError, AdminResponseError) as err:
            self._warn(f"cannot tell whether the cluster sheds by itself ({err}); no unload this cycle")
            return self._postpone(moves, "the cluster's shedding setting could not be read")
        retries, self._retry = self._retry, {}
        for bundle, move in retries.items():
            owner = cluster.owner_of(bundle)
            if owner == move.destination:
                self._unloaded_at[bundle] = now
                log.info("apply: %s is on %s after all (the failed unload went through)", bundle, move.destination)
                actions.append(Action(move, "unloaded", "found on its destination at the retry", retry=True))
            elif owner != move.source or move.destination not in active:
                where = "no broker" if owner is None else owner
                reason = f"not retried: now on {where}" if owner != move.source else "not retried: destination gone"
                self._warn(f"apply: gave up unloading {bundle} from {move.source} to {move.destination} ({reason})")
                actions.append(Action(move, "gave up", reason, retry=True))
            else:
                actions.append(self._unload(admin, move, now, retry=True))
        for move in moves:
            if move.bundle in retries:
                continue  # handled above, once
            since = self._unloaded_at.get(move.bundle)
            if since is not None and now - since < grace_s:
                reason = f"unloaded {now - since:.0f} s ago, within the grace period ({grace_s / 60:g} min)"
                log.info("apply: %s stays on %s: %s", move.bundle, move.source, reason)
                actions.append(Action(move, "skipped", reason))
            elif _pinned(move.bundle):
                log.info("apply: %s stays on %s: a heartbeat namespace, pinned to its broker", move.bundle, move.source)
                actions.append(Action(move, "skipped", "heartbeat namespace, pinned to its broker"))
            elif cluster.owner_of(move.bundle) != move.source or move.destination not in active:
                actions.append(Action(move, "skipped", "the cluster changed under the decision"))
            else:
                actions.append(self._unload(admin, move, now, retry=False))
        done = sum(a.outcome == "unloaded" for a in actions)
        if actions:
            log.info("apply %s: %d unloaded, %d failed (retried next cycle), %d gave up, %d skipped", self.apply,
                     done, sum(a.outcome == "failed" for a in actions), sum(a.outcome == "gave up" for a in actions),
                     sum(a.outcome == "skipped" for a in actions))
        return actions

    def _postpone(self, moves: Sequence[Move], reason: str) -> list[Action]:
        """No unload this cycle: the retries wait for the next one, the new moves are dropped (a later
        cycle decides again on newer data)."""
        return [Action(m, "skipped", reason) for m in moves]

    def _unload(self, admin: _Admin, move: Move, now: float, retry: bool) -> Action:
        bundle, source, destination = move
        what = f"apply: unload {bundle} from {source} to {destination}"
        try:
            url = self._live_base + _unload_path(bundle)
            response = admin.request("PUT", url, what, {"destinationBroker": destination})
            if response.status_code >= 300:
                _json(response, what)  # raises with the status and Pulsar's reason
        except (AdminUnreachableError, AdminResponseError) as err:
            if retry:
                self._warn(f"{err}; gave up after the retry")
                return Action(move, "gave up", _reason(err), retry=True)
            self._retry[bundle] = move
            self._warn(f"{err}; retried at the next cycle")
            return Action(move, "failed", _reason(err))
        self._unloaded_at[bundle] = now
        log.info("%s: done", what)
        return Action(move, "unloaded", retry=retry)

    # -- recording ---------------------------------------------------------------------------------

    def _write(
        self,
        index: int,
        timestamp_ms: int,
        brokers: Mapping[str, Mapping[str, Any]],
        bundles: Mapping[str, Mapping[str, Any]],
        decisions: Mapping[str, Sequence[Move]],
        unloads: Mapping[str, Sequence[tuple[str, str]]],
        applied: Sequence[Action],
    ) -> Path:
        """The snapshot file (whole, then renamed into place), then its line in decisions.jsonl."""
        assert self.record is not None
        name = f"snapshot-{self._next_file:06d}.json"
        self._next_file += 1
        path = self.record / name
        partial = self.record / f".{name}.partial"
        text = json.dumps({"timestamp": timestamp_ms, "brokers": brokers, "bundles": bundles}, sort_keys=False)
        partial.write_text(text + "\n", encoding="utf-8")
        os.replace(partial, path)
        line = {
            "cycle": index,
            "file": name,
            "timestamp": timestamp_ms,
            "recently_unloaded": {b: round(t * 1000) for b, t in sorted(self._unloaded_at.items())},
            "unloads": {s: [list(u) for u in rows] for s, rows in unloads.items()},
            "decisions": {s: [list(m) for m in moves] for s, moves in decisions.items()},
            "applied": [a.to_json() for a in applied],
        }
        with (self.record / DECISIONS_FILE).open("a", encoding="utf-8") as out:
            out.write(json.dumps(line) + "\n")
        return path

    # -- lifetime ----------------------------------------------------------------------------------

    def close(self) -> None:
        if self._admin is not None:
            self._admin.close()

    def __enter__(self) -> SheddingWatch:
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.close()


def _cluster_config(runtime: Mapping[str, str]) -> ShedderConfig:
    """The settings the table models, from a broker's runtime configuration (the strategy class names
    left out: the watch runs the strategies it is given)."""
    skip = {"loadBalancerLoadSheddingStrategy", "loadBalancerLoadPlacementStrategy"}
    return ShedderConfig.from_properties({k: v for k, v in runtime.items() if k in PROPERTY_NAMES and k not in skip})


def read_decisions(directory: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The lines of a recording's decisions.jsonl, oldest first (a last line cut by a crash is left out)."""
    path = Path(directory) / DECISIONS_FILE
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            log.warning("%s: a line that is not JSON (cut short?) left out", path)
    return out
