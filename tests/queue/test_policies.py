"""ThreadPolicy and PartitionPolicy resolution: the seed's rules, and their input validation."""

from __future__ import annotations

import os

import pytest

from rebalancer.queue import PartitionPolicy, ThreadPolicy


@pytest.fixture
def eight_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "cpu_count", lambda: 8)


# ThreadPolicy -------------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 4, 17])
def test_fixed_threads_resolve_to_exactly_n(n: int) -> None:
    assert ThreadPolicy.fixed(n).resolve() == n


def test_cpu_cores_scales_with_cpu_count(eight_cores: None) -> None:
    assert ThreadPolicy.cpu_cores(1.0).resolve() == 8
    assert ThreadPolicy.cpu_cores(0.5).resolve() == 4
    assert ThreadPolicy.cpu_cores(2.0).resolve() == 16


def test_cpu_cores_with_base_adds_base(eight_cores: None) -> None:
    # The seed's L2 persistence example: 1 + 0.25 * 8 = 3 on an 8-core machine.
    assert ThreadPolicy.cpu_cores_with_base(1, 0.25).resolve() == 3
    assert ThreadPolicy.cpu_cores_with_base(2, 1.0).resolve() == 10


def test_thread_policy_resolves_to_at_least_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    assert ThreadPolicy.cpu_cores(0.01).resolve() == 1
    assert ThreadPolicy.cpu_cores_with_base(0, 0.01).resolve() == 1


def test_thread_policy_survives_unknown_cpu_count(monkeypatch: pytest.MonkeyPatch) -> None:
    # os.cpu_count() may return None; the policy still resolves to a usable count.
    monkeypatch.setattr(os, "cpu_count", lambda: None)
    assert ThreadPolicy.cpu_cores(1.0).resolve() >= 1


@pytest.mark.parametrize("n", [0, -1, -8])
def test_fixed_non_positive_thread_count_raises(n: int) -> None:
    with pytest.raises(ValueError, match=str(n)):
        ThreadPolicy.fixed(n)


@pytest.mark.parametrize("multiplier", [0, 0.0, -0.5, -2])
def test_cpu_cores_non_positive_multiplier_raises(multiplier: float) -> None:
    with pytest.raises(ValueError, match=str(multiplier).replace(".", r"\.")):
        ThreadPolicy.cpu_cores(multiplier)


@pytest.mark.parametrize("multiplier", [0, -0.25])
def test_cpu_cores_with_base_non_positive_multiplier_raises(multiplier: float) -> None:
    with pytest.raises(ValueError, match=str(multiplier).replace(".", r"\.")):
        ThreadPolicy.cpu_cores_with_base(1, multiplier)


# PartitionPolicy ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("threads", "handlers", "expected"), [(8, 0, 8), (8, 100, 100), (8, 500, 350)])
def test_adaptive_matches_seed_examples(threads: int, handlers: int, expected: int) -> None:
    assert PartitionPolicy.adaptive().resolve(threads, handlers) == expected


def test_adaptive_threshold_is_threads_times_multiplier() -> None:
    policy = PartitionPolicy.adaptive()  # default multiplier 25: threshold 200 with 8 threads
    assert policy.resolve(8, 200) == 200
    assert policy.resolve(8, 202) == 201  # 200 + 2/2
    assert policy.resolve(8, 1000) == 600  # 200 + 800/2


def test_adaptive_custom_multiplier() -> None:
    policy = PartitionPolicy.adaptive(multiplier=10)  # threshold 40 with 4 threads
    assert policy.resolve(4, 0) == 4
    assert policy.resolve(4, 40) == 40
    assert policy.resolve(4, 60) == 50  # 40 + 20/2


def test_adaptive_grows_monotonically_with_handlers() -> None:
    policy = PartitionPolicy.adaptive()
    counts = [policy.resolve(4, h) for h in range(4, 600)]
    assert counts == sorted(counts)


def test_fixed_partitions_ignore_threads_and_handlers() -> None:
    assert PartitionPolicy.fixed(6).resolve(1, 0) == 6
    assert PartitionPolicy.fixed(6).resolve(8, 500) == 6


def test_thread_multiply() -> None:
    assert PartitionPolicy.thread_multiply(2).resolve(8, 0) == 16
    assert PartitionPolicy.thread_multiply(3).resolve(4, 1000) == 12


@pytest.mark.parametrize("n", [0, -3])
def test_fixed_non_positive_partition_count_raises(n: int) -> None:
    with pytest.raises(ValueError, match=str(n)):
        PartitionPolicy.fixed(n)


@pytest.mark.parametrize("n", [0, -1])
def test_thread_multiply_non_positive_raises(n: int) -> None:
    with pytest.raises(ValueError, match=str(n)):
        PartitionPolicy.thread_multiply(n)


@pytest.mark.parametrize("n", [0, -25])
def test_adaptive_non_positive_multiplier_raises(n: int) -> None:
    with pytest.raises(ValueError, match=str(n)):
        PartitionPolicy.adaptive(multiplier=n)
