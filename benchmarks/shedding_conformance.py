"""The Pulsar ports against Pulsar's own classes: seeded random snapshots through both, decisions compared.

Every strategy and placement the simulator offers under a Pulsar name (ThresholdShedder,
OverloadShedder, UniformLoadShedder, AvgShedder, TransferShedder, LeastLongTermMessageRate,
LeastResourceUsageWithWeight) gets --count snapshots (1,000 by default), generated from --seed, plus
the vectors translated from Pulsar's own unit tests (tests/conformance). Each goes through the harness
in conformance/pulsar (Pulsar's classes, pulsar-broker as pinned there, one JVM) and through the ports,
and their decisions are compared exactly; a placement that draws at random is compared by the set it
draws from. Target: mismatches=0, every other difference a deviation documented in docs/shedding.md.

    .venv/bin/python benchmarks/shedding_conformance.py [--count N] [--seed S] [--show K]

Needs a JDK 17 and Maven (`make pulsar-conformance` builds the harness first).
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections import Counter
from pathlib import Path

# The harness's Python side is test code beside its Maven project (conformance/), not in the package.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "conformance"))

from pulsar_conformance import (
    DEVIATIONS,
    PULSAR_VERSION,
    STRATEGIES,
    PulsarHarness,
    Verdict,
    check_expectations,
    generate_cases,
    load_cases,
    vector_files,
    verdict,
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=1000, help="random snapshots per strategy")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--show", type=int, default=5, help="mismatches to print per strategy")
    args = parser.parse_args(argv)
    logging.getLogger("rebalancer.shedding").setLevel(logging.ERROR)  # the ports' sole-bundle warnings

    started = time.perf_counter()
    vectors = [case for path in vector_files() for case in load_cases(path)]
    verdicts: list[Verdict] = []
    vector_failures: list[str] = []
    with PulsarHarness() as harness:
        for case, pulsar in zip(vectors, harness.run(vectors), strict=True):
            vector_failures += [f"{case['id']}: {f}" for f in check_expectations(case, pulsar)]
            verdicts.append(verdict(case, pulsar))
        print(f"Pulsar {PULSAR_VERSION}: {len(vectors)} vectors from Pulsar's unit tests")
        print(f"{'strategy':<30} {'snapshots':>9} {'match':>6} {'deviation':>9} {'mismatch':>8} {'seconds':>8}")
        for strategy in STRATEGIES:
            t0 = time.perf_counter()
            cases = generate_cases(strategy, args.count, seed=args.seed)
            pulsar_results = harness.run(cases)
            results = [verdict(c, p) for c, p in zip(cases, pulsar_results, strict=True)]
            verdicts += results
            counts = Counter(v.status for v in results)
            print(
                f"{strategy:<30} {len(results):>9} {counts['match']:>6} {counts['deviation']:>9} "
                f"{counts['mismatch']:>8} {time.perf_counter() - t0:>8.1f}"
            )
            for v in [v for v in results if v.status == "mismatch"][: args.show]:
                print(f"    MISMATCH {v.case_id}: {v.detail}")
    for failure in vector_failures:
        print(f"    VECTOR {failure}")
    for v in verdicts[: len(vectors)]:
        if v.status == "mismatch":
            print(f"    VECTOR MISMATCH {v.case_id}: {v.detail}")
    deviations = Counter(v.deviation for v in verdicts if v.status == "deviation")
    for key, n in sorted(deviations.items()):
        what, reference = DEVIATIONS[key]
        print(f"documented deviation {key} ({reference}): {n} snapshots. {what}")
    mismatches = sum(v.status == "mismatch" for v in verdicts) + len(vector_failures)
    print(f"{len(verdicts)} snapshots in {time.perf_counter() - started:.1f}s")
    print(
        f"RESULT strategies={len(STRATEGIES)} snapshots={len(verdicts)} mismatches={mismatches} "
        f"documented_deviations={sum(deviations.values())}"
    )
    return 0 if mismatches == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
