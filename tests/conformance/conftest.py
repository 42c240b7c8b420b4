"""One JVM for the whole session: the Pulsar conformance harness (conformance/pulsar).

`make test` builds it first (`make pulsar-conformance`); run alone, the fixture builds it with Maven if
its sources changed. Without a JDK or Maven the tests fail, naming what is missing; deselect them with
`-m "not pulsar"`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from pulsar_conformance import HarnessUnavailable, PulsarHarness


@pytest.fixture(scope="session")
def pulsar_harness() -> Iterator[PulsarHarness]:
    try:
        harness = PulsarHarness()
    except HarnessUnavailable as err:
        pytest.fail(f"the Pulsar conformance harness is unavailable: {err}", pytrace=False)
    # The ports log every sole-bundle warning Pulsar logs; thousands of snapshots make that noise.
    logging.getLogger("rebalancer.shedding").setLevel(logging.ERROR)
    yield harness
    harness.close()
