"""One librdkafka mock cluster for the producer tests; each test makes its own topic."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator

import pytest

from rebalancer.testing import MockKafkaCluster

_topic_ids = itertools.count()


@pytest.fixture(scope="module")
def cluster(request: pytest.FixtureRequest) -> Iterator[MockKafkaCluster]:
    mock = MockKafkaCluster(brokers=3)
    request.addfinalizer(mock.close)
    yield mock


@pytest.fixture
def new_topic(cluster: MockKafkaCluster) -> Callable[[int], str]:
    def make(partitions: int) -> str:
        name = f"t{next(_topic_ids)}"
        cluster.create_topic(name, partitions=partitions)
        return name

    return make
