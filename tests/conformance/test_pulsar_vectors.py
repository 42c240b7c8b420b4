"""The cases of Pulsar's own unit tests, as data (tests/conformance/pulsar_*.jsonl): Pulsar's classes
must reproduce what those tests assert, and the ports must decide exactly as Pulsar's classes do."""

from __future__ import annotations

from typing import Any

import pytest

from pulsar_conformance import (
    PulsarHarness,
    check_expectations,
    load_cases,
    vector_files,
    verdict,
)

pytestmark = pytest.mark.pulsar

CASES = [case for path in vector_files() for case in load_cases(path)]


@pytest.fixture(scope="module")
def pulsar_results(pulsar_harness: PulsarHarness) -> dict[str, dict[str, Any]]:
    return {r["id"]: r for r in pulsar_harness.run(CASES)}


def test_every_translated_test_class_is_there():
    classes = {case["test"].split("#")[0].rsplit(".", 1)[1] for case in CASES}
    assert classes == {
        "AvgShedderTest",
        "ThresholdShedderTest",
        "OverloadShedderTest",
        "UniformLoadShedderTest",
        "TransferShedderTest",
        "ModularLoadManagerStrategyTest",
    }
    assert len({case["id"] for case in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[case["id"] for case in CASES])
def test_vector(case: dict[str, Any], pulsar_results: dict[str, dict[str, Any]]):
    pulsar = pulsar_results[case["id"]]
    assert "error" not in pulsar, pulsar.get("error")
    assert check_expectations(case, pulsar) == []
    result = verdict(case, pulsar)
    assert result.status != "mismatch", result.detail
