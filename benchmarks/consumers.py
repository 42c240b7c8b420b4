"""Consumer-flow rebalancing: handoffs per membership change, against two baselines, and speed at 10k.

Random churn (binds and unbinds) over P partitions. Every strategy starts from the same balanced state
and reacts to every event; a handoff is a partition moving between two live flows (partitions whose
flow left are mapped for free by all three). Strategies:
  ours       PartitionedQueue (each event's holddown ends before the next event);
  naive      round-robin reassign: partition p -> flows[p % F] after every change;
  max->min   Solace's loop without stickiness: orphans to the fewest, then one partition at a time
             from the flow with the most to the flow with the fewest, the partition picked at random.
Then: flapping consumers (leave and come back within the delay), weighted evenness, and the time of
one rebalance at P=10,000, F=1,000. Last line: RESULT.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from rebalancer.balance.count import handoff_lower_bound, plan_count_balance
from rebalancer.consumers import HandoffCompleted, PartitionedQueue


def churn_events(rng: random.Random, flows: int, events: int, partitions: int) -> list[tuple[str, str]]:
    live = [f"f{i}" for i in range(flows)]
    next_id = flows
    out: list[tuple[str, str]] = []
    for _ in range(events):
        grow = len(live) <= flows // 2 or (len(live) < min(2 * flows, partitions) and rng.random() < 0.5)
        if grow:
            f = f"f{next_id}"
            next_id += 1
            live.append(f)
            out.append(("bind", f))
        else:
            f = live.pop(rng.randrange(len(live)))
            out.append(("unbind", f))
    return out


def initial(partitions: int, flows: int) -> list[str]:
    return [f"f{p % flows}" for p in range(partitions)]


def run_ours(partitions: int, flows: int, events: list[tuple[str, str]]) -> tuple[list[int], list[int]]:
    pq = PartitionedQueue(partitions, rebalance_delay_s=1.0, max_handoff_time_s=1.0)
    for i in range(flows):
        pq.bind(f"f{i}", now=0.0)
    pq.poll(now=1.0)
    handoffs: list[int] = []
    bounds: list[int] = []
    t = 1.0
    for kind, f in events:
        t += 2.0
        members = pq.flows + ([f] if kind == "bind" else [])
        if kind == "unbind":
            members.remove(f)
        counts = {m: 0 for m in members}
        for p in range(partitions):
            o = pq.owner(p)
            if o in counts:
                counts[o] += 1
        bounds.append(handoff_lower_bound(list(counts.values()), partitions))
        getattr(pq, kind)(f, now=t)
        handoffs.append(sum(isinstance(e, HandoffCompleted) for e in pq.poll(now=t + 1.0)))
    return handoffs, bounds


def run_naive(partitions: int, flows: int, events: list[tuple[str, str]]) -> list[int]:
    owner = initial(partitions, flows)
    live = [f"f{i}" for i in range(flows)]
    out: list[int] = []
    for kind, f in events:
        if kind == "bind":
            live.append(f)
        else:
            live.remove(f)
        alive = set(live)
        new = [live[p % len(live)] for p in range(partitions)]
        out.append(sum(1 for o, n in zip(owner, new) if o in alive and o != n))
        owner = new
    return out


def run_max_min(
    partitions: int, flows: int, events: list[tuple[str, str]], rng: random.Random
) -> tuple[list[int], list[str]]:
    owner: list[str | None] = list(initial(partitions, flows))
    held: dict[str, list[int]] = {f"f{i}": [] for i in range(flows)}
    for p, o in enumerate(owner):
        held[o].append(p)
    out: list[int] = []
    for kind, f in events:
        if kind == "bind":
            held[f] = []
        else:
            for p in held.pop(f):
                owner[p] = None
        for p in range(partitions):
            if owner[p] is None:
                g = min(held, key=lambda x: len(held[x]))
                held[g].append(p)
                owner[p] = g
        moves = 0
        while True:
            hi = max(held, key=lambda x: len(held[x]))
            lo = min(held, key=lambda x: len(held[x]))
            if len(held[hi]) - len(held[lo]) <= 1:
                break
            p = held[hi].pop(rng.randrange(len(held[hi])))
            held[lo].append(p)
            owner[p] = lo
            moves += 1
        out.append(moves)
    return out, [o for o in owner if o is not None]


def flapping(partitions: int, flows: int, flaps: int, rng: random.Random) -> tuple[int, int]:
    """A random flow disconnects and its replacement binds 1 s later: holddown 5 s vs. none."""
    results = []
    for delay in (5.0, 0.0):
        pq = PartitionedQueue(partitions, rebalance_delay_s=delay, max_handoff_time_s=1.0)
        for i in range(flows):
            pq.bind(f"f{i}", now=0.0)
        pq.poll(now=10.0)
        setup = pq.handoff_count  # without a holddown, the initial binds already moved partitions
        t = 10.0
        live = [f"f{i}" for i in range(flows)]
        for k in range(flaps):
            gone = live.pop(rng.randrange(len(live)))
            pq.unbind(gone, now=t)
            pq.bind(f"r{k}", now=t + 1.0)
            live.append(f"r{k}")
            t += 20.0
            pq.poll(now=t)
        results.append(pq.handoff_count - setup)
    return results[0], results[1]


def weighted_evenness(partitions: int, flows: int, events: list[tuple[str, str]]) -> tuple[float, float]:
    """Max/mean summed weight after the churn: weights given to the planner vs. ignored."""
    rng = random.Random(11)
    weights = [rng.expovariate(1.0) for _ in range(partitions)]
    out = []
    for w in (None, weights):
        pq = PartitionedQueue(partitions, rebalance_delay_s=1.0, max_handoff_time_s=1.0, weights=w)
        for i in range(flows):
            pq.bind(f"f{i}", now=0.0)
        t = 0.0
        for kind, f in events:
            t += 2.0
            getattr(pq, kind)(f, now=t)
            pq.poll(now=t + 1.0)
        loads = [sum(weights[p] for p in ps) for ps in pq.assignment.values()]
        out.append(max(loads) / statistics.fmean(loads))
    return out[0], out[1]


def rebalance_timing(partitions: int, flows: int, repeats: int) -> tuple[float, float, float]:
    """Median ms for one bind or unbind handled end to end (plan and every handoff), and for planning."""
    pq = PartitionedQueue(partitions, rebalance_delay_s=1.0, max_handoff_time_s=1.0)
    for i in range(flows):
        pq.bind(f"f{i}", now=0.0)
    pq.poll(now=1.0)
    rng = random.Random(5)
    t = 1.0
    samples = []
    for k in range(repeats):
        t += 2.0
        start = time.perf_counter()
        if k % 2 == 0:
            pq.bind(f"x{k}", now=t)
        else:
            pq.unbind(rng.choice(pq.flows), now=t)
        events = pq.poll(now=t + 1.0)
        samples.append((time.perf_counter() - start) * 1000)
        assert pq.status == "ready" and any(True for _ in events)
    owner = [pq.owner(p) for p in range(partitions)]
    members = [*pq.flows, "new"]
    weights = [1.0 + (p % 17) for p in range(partitions)]
    plan_ms = []
    weighted_ms = []
    for _ in range(repeats):
        start = time.perf_counter()
        plan_count_balance(owner, members)
        plan_ms.append((time.perf_counter() - start) * 1000)
        start = time.perf_counter()
        plan_count_balance(owner, members, weights)
        weighted_ms.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples), statistics.median(plan_ms), statistics.median(weighted_ms)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--flows", type=int, default=100)
    parser.add_argument("--events", type=int, default=400)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    P, F, K = args.partitions, args.flows, args.events
    events = churn_events(rng, F, K, P)
    ours, bounds = run_ours(P, F, events)
    naive = run_naive(P, F, events)
    max_min, _ = run_max_min(P, F, events, random.Random(args.seed + 1))
    assert sum(ours) == sum(bounds), "ours must hit the lower bound on every event"
    per = lambda xs: sum(xs) / len(xs)  # noqa: E731
    print(f"churn: P={P} F={F} K={K} events ({sum(k == 'bind' for k, _ in events)} binds)")
    print(
        f"  handoffs/event  ours={per(ours):.3f}  naive round-robin={per(naive):.3f}  "
        f"max->min={per(max_min):.3f}  lower bound={per(bounds):.3f}"
    )
    print(f"  events where ours > lower bound: {sum(o > b for o, b in zip(ours, bounds))}")
    hold, no_hold = flapping(P, F, 50, random.Random(args.seed + 2))
    print(f"flapping (50 leave+rejoin within 1 s): handoffs with 5 s holddown={hold}, without={no_hold}")
    plain, weighted = weighted_evenness(P, F, events)
    print(f"weighted evenness after churn (max/mean load): weights ignored={plain:.3f}, used={weighted:.3f}")
    ms, plan_ms, weighted_ms = rebalance_timing(10_000, 1_000, 20)
    print(
        f"P=10,000 F=1,000: one rebalance end to end {ms:.2f} ms (plan only {plan_ms:.2f} ms, "
        f"weighted plan {weighted_ms:.2f} ms)"
    )
    print(
        f"RESULT handoffs_ours={per(ours):.3f} handoffs_naive={per(naive):.3f} "
        f"lower_bound={per(bounds):.3f} rebalance_ms_10k={ms:.2f}"
    )


if __name__ == "__main__":
    main()
