"""Every public stats-like dict names each of its keys in its docstring, so a number such as
`stats()["sends"]` says what it counts (issue 38)."""

from __future__ import annotations

import dataclasses
import inspect

import numpy as np

from rebalancer.queue import BatchQueueStats
from rebalancer.shedding.compare import Comparison
from rebalancer.shedding.sim import SimConfig, SimResult


def undocumented(keys: object, method: object) -> list[str]:
    doc = inspect.getdoc(method) or ""
    return [k for k in keys if f"``{k}``" not in doc]  # type: ignore[attr-defined]


def test_sim_summary_and_comparison_totals_document_their_keys():
    n = 3
    zeros = np.zeros(n, int)
    result = SimResult("s", "x", np.arange(n), {}, np.zeros(n), np.zeros(n), zeros, zeros, zeros, zeros, zeros,
                       zeros, None)
    assert undocumented(result.summary(), SimResult.summary) == []
    comparison = Comparison([], [], {}, SimConfig())
    assert undocumented(comparison.totals("x"), Comparison.totals) == []


def test_batch_queue_stats_documents_every_field():
    doc = inspect.getdoc(BatchQueueStats) or ""
    assert [f.name for f in dataclasses.fields(BatchQueueStats) if f"`{f.name}`" not in doc] == []


def test_the_producer_and_the_collector_document_every_stats_key():
    from rebalancer.produce import BatchingProducer, BrokerBatchCollector

    assert undocumented(BrokerBatchCollector().stats(), BrokerBatchCollector.stats) == []
    producer = BatchingProducer({"bootstrap.servers": "127.0.0.1:9"})  # never started: zeros
    assert undocumented(producer.stats(), BatchingProducer.stats) == []
