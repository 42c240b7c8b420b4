"""Run every combination over the scenarios, rate the PIP-364 columns from the numbers, plot usage.

Rating rule (one column, one scenario, one rule; see docs/shedding.md):

* heterogeneous: bad if any broker spent a minute above the overload threshold (85%); good if the
  spread converged; otherwise normal.
* jitter: good with no bundle moved; normal with 1..5 moves and no oscillation; otherwise bad.
* over-placement: bad with any over-placement event; good if the spread converged; otherwise normal.
* over-unloading: bad with any over-unloading event or oscillation; good if converged; otherwise normal.
* slow balancing: good if converged within 10 cycles of the new brokers joining; normal within 30;
  otherwise bad.

"Converged" means the max-min usage spread stayed under the scenario's target for K cycles in a row.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rebalancer._extras import require_extra
from rebalancer.shedding.sim import COMBINATIONS, Combination, Scenario, SimConfig, SimResult, simulate

log = logging.getLogger(__name__)

PIP_COLUMNS = ("heterogeneous", "jitter", "over-placement", "over-unloading", "slow balancing")


def rate(column: str, result: SimResult) -> str:
    s = result.summary()
    converged = result.converge_cycles is not None
    if column == "heterogeneous":
        if s["overloaded_minutes"]:
            return "bad"
        return "good" if converged else "normal"
    if column == "jitter":
        if s["moves"] == 0:
            return "good"
        return "normal" if result.moves <= 5 and s["oscillations"] == 0 else "bad"
    if column == "over-placement":
        if s["over_placement"]:
            return "bad"
        return "good" if converged else "normal"
    if column == "over-unloading":
        if s["over_unloading"] or s["oscillations"]:
            return "bad"
        return "good" if converged else "normal"
    if column == "slow balancing":
        cycles = result.converge_cycles
        if cycles is not None and cycles <= 10:
            return "good"
        return "normal" if cycles is not None and cycles <= 30 else "bad"
    raise ValueError(f"unknown column {column!r}; choose one of {PIP_COLUMNS}")


def cell(column: str, result: SimResult) -> str:
    """The rating with the numbers it was derived from."""
    s = result.summary()
    cycles = result.converge_cycles
    conv = "never converged" if cycles is None else f"converged in {cycles} cycle{'s' * (cycles != 1)}"
    details = {
        "heterogeneous": f"spread {s['final_spread']:.0f} % points, {s['overloaded_minutes']} overloaded "
        f"broker-minutes, {conv}",
        "jitter": f"{s['moves']} moves, {s['oscillations']} oscillations",
        "over-placement": f"{s['over_placement']} over-placements, {conv}",
        "over-unloading": f"{s['over_unloading']} over-unloads, {s['oscillations']} oscillations, {conv}",
        "slow balancing": f"{conv}, {s['moves']} moves",
    }[column]
    return f"{rate(column, result)} ({details})"


def converge_or_horizon(result: SimResult, scenario: Scenario, config: SimConfig) -> int:
    """Cycles to converge; a run that never converged counts the whole horizon."""
    if result.converge_cycles is not None:
        return result.converge_cycles
    return (scenario.minutes - scenario.converge_from) // config.interval


@dataclass
class Comparison:
    scenarios: list[Scenario]
    combos: list[Combination]
    results: dict[tuple[str, str], SimResult]  # (scenario, strategy) -> result
    config: SimConfig

    def result(self, scenario: str, strategy: str) -> SimResult:
        return self.results[(scenario, strategy)]

    def totals(self, strategy: str) -> dict[str, int]:
        """One strategy over every scenario: ``moves`` (bundles moved), ``converge_cycles`` (shedding
        cycles to converge; a run that never converged counts its whole horizon) and ``oscillations``
        (moves back to a broker the bundle had left)."""
        moves = converge = osc = 0
        for sc in self.scenarios:
            r = self.results[(sc.name, strategy)]
            moves += r.moves
            converge += converge_or_horizon(r, sc, self.config)
            osc += int(r.oscillations.sum())
        return {"moves": moves, "converge_cycles": converge, "oscillations": osc}

    def pip_rows(self, numbers: bool = True) -> list[list[str]]:
        """Per combination, its name and each PIP-364 column's rating, with the numbers it rests on
        (`cell`) unless not `numbers`; "-" for a column whose scenario did not run."""
        by_column = {sc.column: sc for sc in self.scenarios if sc.column}
        rows = []
        for combo in self.combos:
            row = [combo.name]
            for column in PIP_COLUMNS:
                sc = by_column.get(column)
                if sc is None:
                    row.append("-")
                    continue
                result = self.results[(sc.name, combo.name)]
                row.append(cell(column, result) if numbers else rate(column, result))
            rows.append(row)
        return rows

    def detail_rows(self) -> list[list[str]]:
        rows = []
        for sc in self.scenarios:
            for combo in self.combos:
                s = self.results[(sc.name, combo.name)].summary()
                conv = "never" if s["converge_cycles"] is None else str(s["converge_cycles"])
                rows.append(
                    [
                        sc.name,
                        combo.name,
                        str(s["moves"]),
                        conv,
                        f"{s['final_spread']:.1f}",
                        str(s["oscillations"]),
                        str(s["over_placement"]),
                        str(s["over_unloading"]),
                        str(s["overloaded_minutes"]),
                    ]
                )
        return rows


def run_comparison(
    scenarios: Sequence[Scenario],
    combos: Sequence[Combination] = COMBINATIONS,
    seed: int = 0,
    config: SimConfig | None = None,
) -> Comparison:
    config = config or SimConfig()
    results = {}
    for sc in scenarios:
        for combo in combos:
            results[(sc.name, combo.name)] = simulate(sc, combo, seed=seed, config=config)
    return Comparison(list(scenarios), list(combos), results, config)


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def _pyplot() -> Any:
    """matplotlib's pyplot on the file-only Agg backend; a missing 'plots' extra is named."""
    require_extra("rebalancer.shedding plots", "plots")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_result(result: SimResult, path: Path, overload: float = 85.0) -> Path:
    """Usage per broker over time, with the spread underneath; returns the file written.

    A path without a suffix gets `.png`, as matplotlib adds it: the path returned is the real one.
    """
    plt = _pyplot()
    path = Path(path)
    if not path.suffix:
        path = path.with_name(path.name + ".png")

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 5.5), sharex=True, height_ratios=(3, 1))
    many = len(result.usage) > 12
    for broker, series in result.usage.items():
        top.plot(
            result.minutes,
            series,
            lw=0.6 if many else 1.2,
            alpha=0.5 if many else 0.9,
            label=None if many else broker,
        )
    top.axhline(overload, color="red", ls="--", lw=0.8, label="overload threshold")
    top.set_ylabel("CPU usage %")
    top.set_ylim(0, 105)
    top.set_title(f"{result.scenario} — {result.strategy}: {result.moves} moves")
    top.legend(fontsize=7, ncol=4, loc="upper right")
    bottom.plot(result.minutes, result.spread, color="black", lw=1)
    bottom.axhline(result.converge_target, color="green", ls=":", lw=0.8)
    bottom.set_ylabel("max-min")
    bottom.set_xlabel("minute")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def plot_side_by_side(results: Sequence[SimResult], path: Path, overload: float = 85.0) -> Path:
    """One scenario, several strategies: the README figure."""
    plt = _pyplot()

    fig, axes = plt.subplots(1, len(results), figsize=(5 * len(results), 3.6), sharey=True)
    axes = [axes] if len(results) == 1 else list(axes)
    for ax, result in zip(axes, results):
        for broker, series in result.usage.items():
            ax.plot(result.minutes, series, lw=1.1, label=broker)
        ax.axhline(overload, color="red", ls="--", lw=0.8)
        conv = "never" if result.converge_cycles is None else f"{result.converge_cycles} cycles"
        ax.set_title(f"{result.strategy}\n{result.moves} moves, converged: {conv}", fontsize=9)
        ax.set_xlabel("minute")
    axes[0].set_ylabel(f"CPU usage % ({results[0].scenario})")
    axes[-1].legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def write_plots(comparison: Comparison, out: Path) -> list[Path]:
    paths = []
    for (scenario, strategy), result in comparison.results.items():
        paths.append(plot_result(result, out / f"{slug(scenario)}__{slug(strategy)}.png"))
    return paths
