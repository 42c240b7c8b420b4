"""Issue 43: `produce` has no import circle, hidden or not, and `produce` and `testing` do not
import each other; `CollectorConfig`'s defaults are PRODUCER_DEFAULTS's entries, not a second copy.

Imports are read from the sources (tests/import_graph.py), function-level ones included: a lazy
import inside a function was how `config.py` hid its circle with `security.py` and the adapter.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
from pathlib import Path

import pytest

import rebalancer
from import_graph import cycles, function_level_imports, import_graph, package_graph
from rebalancer.produce.config import COLLECTOR_DEFAULTS, PRODUCER_DEFAULTS, CollectorConfig

SRC = Path(rebalancer.__file__).parent.parent
PRODUCE = SRC / "rebalancer" / "produce"
TESTING = SRC / "rebalancer" / "testing"
# The components (docs: CONTRIBUTING.md); `testing` is a peer below them, which their demos use.
# `balance` is the floor every package may stand on (it imports nothing of ours, so no loop runs
# through it); testing uses its one number check (issue 43: is_int and is_number have one home).
COMPONENTS = ("queue", "consumers", "shedding", "pipeline", "produce", "cli")
# CollectorConfig's fields that have a producer key, and that key.
COLLECTOR_FIELDS = {
    "broker_linger_ms": "broker.linger.ms",
    "batch_max_partitions": "broker.batch.max.partitions",
    "batch_max_bytes": "broker.batch.max.bytes",
    "max_request_size": "message.max.bytes",
    "max_in_flight": "max.in.flight.requests.per.connection",
    "adaptive": "broker.adaptive",
}


def test_produce_has_no_import_cycle() -> None:
    graph = import_graph(PRODUCE, SRC)
    assert {"rebalancer.produce.config", "rebalancer.produce.security", "rebalancer.produce.aiokafka_adapter"} <= set(
        graph
    )
    assert cycles(graph) == []


# The demo's handler loads our modules that need the 'kafka' and 'cli' extras (the producer, the
# mock cluster, rich's console): `produce demo --help` works without them (issue 46, item 4).
NEED_AN_EXTRA = {
    ("rebalancer.produce.commands", "rebalancer._console"),
    ("rebalancer.produce.commands", "rebalancer.produce.producer"),
    ("rebalancer.produce.commands", "rebalancer.testing"),
}


def test_no_function_level_import_of_our_own_modules_in_produce_or_testing() -> None:
    """A function-level import is kept only for an optional package (the 'kafka' or 'postgres'
    extra), never to dodge a circle between our own modules."""
    ours = [
        entry
        for package in (PRODUCE, TESTING)
        for entry in function_level_imports(package, SRC)
        if entry[2] == "rebalancer" or entry[2].startswith("rebalancer.")
    ]
    assert {(module, imported) for module, _, imported in ours} == NEED_AN_EXTRA


def test_testing_imports_no_component_so_produce_and_testing_make_no_loop() -> None:
    graph = package_graph(import_graph(SRC / "rebalancer", SRC))
    assert "rebalancer.testing" in graph["rebalancer.produce"]  # the demo's mock cluster: one way
    assert graph["rebalancer.testing"] & {f"rebalancer.{name}" for name in COMPONENTS} == set()
    both = {name: graph[name] & {"rebalancer.produce", "rebalancer.testing"} for name in ("rebalancer.produce", "rebalancer.testing")}
    assert cycles(both) == []


def test_the_package_fold_finds_a_loop_between_packages(tmp_path: Path) -> None:
    root = tmp_path / "src"
    for package in ("p", "t"):
        (root / "top" / package).mkdir(parents=True)
        (root / "top" / package / "__init__.py").write_text("")
    (root / "top" / "__init__.py").write_text("")
    (root / "top" / "p" / "commands.py").write_text("def demo():\n    from top.t import cluster\n")
    (root / "top" / "t" / "cluster.py").write_text("")
    (root / "top" / "t" / "faults.py").write_text("def run():\n    from top.p import producer\n")
    (root / "top" / "p" / "producer.py").write_text("")
    graph = import_graph(root / "top", root)
    assert cycles(graph) == []  # no circle between modules...
    assert cycles(package_graph(graph)) == [["top.p", "top.t"]]  # ...but one between the packages
    assert function_level_imports(root / "top", root) == [("top.p.commands", 2, "top.t"), ("top.t.faults", 2, "top.p")]


def _collector_config_read_afresh(monkeypatch: pytest.MonkeyPatch) -> type:
    """CollectorConfig from a fresh run of its module's source, under another name (removed from
    sys.modules afterwards), so its defaults are read from PRODUCER_DEFAULTS as it is now."""
    path = sys.modules[CollectorConfig.__module__].__file__
    assert path is not None
    spec = importlib.util.spec_from_file_location("collector_config_afresh", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # dataclasses looks its module up there
    spec.loader.exec_module(module)
    fresh = module.CollectorConfig
    assert isinstance(fresh, type) and fresh is not CollectorConfig
    return fresh


def test_collector_config_defaults_are_the_producer_defaults() -> None:
    config = CollectorConfig()
    assert {name: getattr(config, name) for name in COLLECTOR_FIELDS} == {
        name: PRODUCER_DEFAULTS[key] for name, key in COLLECTOR_FIELDS.items()
    }
    assert config == CollectorConfig.from_dict({})
    assert set(COLLECTOR_FIELDS.values()) == set(COLLECTOR_DEFAULTS)


def test_collector_config_takes_its_defaults_from_the_one_table(monkeypatch: pytest.MonkeyPatch) -> None:
    changed = {
        "broker.linger.ms": 7.5,
        "broker.batch.max.partitions": 3,
        "broker.batch.max.bytes": 4096,
        "message.max.bytes": 2000,
        "max.in.flight.requests.per.connection": 2,
        "broker.adaptive": True,
    }
    for key, value in changed.items():
        monkeypatch.setitem(PRODUCER_DEFAULTS, key, value)
    fresh = _collector_config_read_afresh(monkeypatch)()
    assert {name: getattr(fresh, name) for name in COLLECTOR_FIELDS} == {
        name: changed[key] for name, key in COLLECTOR_FIELDS.items()
    }
    # The fields without a producer key keep their own defaults.
    assert {f.name for f in dataclasses.fields(fresh)} - set(COLLECTOR_FIELDS) == {"legacy_linger_ms", "request_size_key"}
