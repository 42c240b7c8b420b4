"""OUT/report.html: one self-contained file, charts embedded as base64 PNGs."""

from __future__ import annotations

import base64
import html
import io
import math
from typing import TYPE_CHECKING, Any

from rebalancer.pipeline.paths import OutputPath
from rebalancer.pipeline.plan.slots import SlotPlan

if TYPE_CHECKING:
    from rebalancer.pipeline.outputs.summary import RunSummary
    from rebalancer.pipeline.plan_from import PreviousRun
    from rebalancer.pipeline.routing.handler_map import HandlerTotals


SECONDS_NONE = "the median task took 0.0 s"  # why a skew of task seconds is None


def format_skew(ratio: float | None, none: str = "the median task is empty") -> str:
    """max/median task rows (or seconds), two decimals; None says `none`: the median task had no
    rows (or measured no time, a clock's noise that must not fail a run)."""
    return f"n/a ({none})" if ratio is None else f"{ratio:.2f}"


# Rows this even with seconds this uneven: the tasks' fixed costs, not their rows, set the wall.
EVEN_ROWS = 1.25
UNEVEN_SECONDS = 1.5


WALL_LABEL = "wall of dispatch, hash vs plan"


def _seconds(value: float, finest: float) -> str:
    """Seconds to one decimal, or to two when one decimal would show the smallest figure of the
    verdict (`finest`) as 0.0: "0.04 s saved" rather than "0.0 s saved" beyond a noise of "0.0"."""
    return f"{value:.2f}" if 0 < finest < 0.05 else f"{value:.1f}"


def wall_phrases(summary: RunSummary) -> list[str] | None:
    """--compare-hash's walls: Spark's hash, the plan, and the verdict (saved, lost or within noise).
    With several passes, each pass's wall follows its side's median, in the order they ran."""
    walls = summary.compare_hash
    if not walls:
        return None
    saved = walls["saved_s"]
    share = "" if walls["saved_pct"] is None else f" ({abs(walls['saved_pct']):.0f}%)"
    hash_runs, plan_runs = list(walls.get("hash_runs", [])), list(walls.get("plan_runs", []))
    runs = len(hash_runs) or 1
    verdict = walls.get("verdict", "saved" if saved >= 0 else "lost")
    noise = walls.get("noise_s", 0.0)
    finest = min((x for x in (abs(saved), noise) if x > 0), default=0.0)

    def each(values: list[float]) -> str:
        return f" ({', '.join(_seconds(v, finest) for v in values)})" if runs > 1 else ""

    head = [
        f"{_seconds(walls['hash_s'], finest)} s with Spark's hash{each(hash_runs)},",
        f"{_seconds(walls['plan_s'], finest)} s under the plan{each(plan_runs)}",
    ]
    if runs > 1:
        head[-1] += ","
        head.append(f"medians of {runs} runs each:")
    else:
        head[-1] += ":"
    if verdict == "within noise":
        return [*head, f"within noise (± {_seconds(noise, finest)} s)"]
    tail = f"{_seconds(abs(saved), finest)} s {verdict}{share}"
    more = f" in all {runs} pairs, more than the noise (± {_seconds(noise, finest)} s)" if runs > 1 else ""
    return [*head, tail + more]


def wall_line(summary: RunSummary) -> str | None:
    phrases = wall_phrases(summary)
    return None if phrases is None else " ".join(phrases)


def wall_note(summary: RunSummary) -> str | None:
    """What the rows alone predict, when they predict little: one rule, from the input and the cores
    alone (never from a measured saving, which varies run to run). A run's wall is at least its
    largest task or its rows over its cores, whichever is larger, so by rows evening the tasks
    shortens it only where a hash task holds more than one core's share of the rows. Said whenever
    Spark's hash gives no task more than 1/cores of the rows; a saving measured beyond the noise then
    comes from what rows do not count, which the note says rather than contradict the measurement."""
    walls = summary.compare_hash
    if walls is None:
        return None
    cores, share = walls.get("cores"), walls.get("hash_largest_share")
    if not cores or share is None or share > 1 / cores:
        return None
    needed = math.floor(1 / share) + 1 if share > 0 else None
    where = f" (from {needed} cores up, for this input)" if needed else ""
    return (
        f"On {cores} {'core' if cores == 1 else 'cores'} no task under Spark's hash holds more than a core's share of the rows (the "
        f"largest holds {share:.0%}): by rows the cores stay busy either way, and placement shortens the "
        f"wall where a task holds more than that{where}. A saving measured here comes from what rows do "
        "not count: each row's cost in its handler, each task's fixed cost."
    )


def uneven_seconds_note(summary: RunSummary) -> str | None:
    """Why even rows may not give even seconds, said only when this run shows it."""
    rows = summary.skew_ratio
    seconds = summary.batch.seconds_skew_ratio if summary.batch is not None else None
    if rows is None or seconds is None or rows > EVEN_ROWS or seconds < UNEVEN_SECONDS:
        return None
    return (
        f"Rows per task are even (skew {rows:.2f}) but seconds are not (skew {seconds:.2f}): the tasks are "
        "small enough that each one's fixed cost (scheduling, starting its Python worker) outweighs its rows."
    )


def _thousands(axis: Any) -> None:
    """Row counts on a value axis as 1,234,567 (not 1.2e6 or 1234567), on linear and log scales alike."""
    from matplotlib.ticker import FuncFormatter

    axis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:,.0f}"))
    axis.set_minor_formatter(FuncFormatter(lambda value, _: ""))


def _png(figure: Any) -> str:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=90, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(figure)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def _bars(series: list[tuple[str, list[float]]], title: str, ylabel: str) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    figure, axis = plt.subplots(figsize=(8, 3.2))
    width = 0.8 / max(len(series), 1)
    for index, (label, values) in enumerate(series):
        positions = np.arange(len(values)) + index * width
        axis.bar(positions, values, width=width, label=label)
    count = max((len(values) for _, values in series), default=0)
    step = max(1, count // 16)
    ticks = np.arange(0, count, step)
    axis.set_xticks(ticks + width * (len(series) - 1) / 2, [str(t) for t in ticks])
    axis.set_title(title)
    axis.set_xlabel("Spark task")
    axis.set_ylabel(ylabel)
    if ylabel == "rows":
        _thousands(axis.yaxis)
    axis.legend()
    return _png(figure)


def _hbars(labels: list[str], values: list[float], title: str, xlabel: str, log: bool = False) -> str:
    """Horizontal bars, each labelled with its value; `log` keeps a few hundred rows visible next to
    hundreds of thousands."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(8, max(2.0, 0.28 * len(labels) + 0.8)))
    bars = axis.barh(labels[::-1], values[::-1], color="#c0504d")
    axis.bar_label(bars, labels=[f"{v:,.0f}" for v in values[::-1]], padding=3, fontsize=8)
    if log:
        axis.set_xscale("log")
        axis.set_xlim(left=1, right=max([*values, 1]) * 8)
    else:
        axis.set_xlim(right=max([*values, 1]) * 1.15)
    _thousands(axis.xaxis)
    axis.set_title(title)
    axis.set_xlabel(xlabel)
    return _png(figure)


def _share(count: int, total: int) -> str:
    """`count` as a whole percentage of `total`; never "100%" for a part, nor "0%" for some rows."""
    if count == total:
        return "100%"
    percent = round(100 * count / total)
    return ">99%" if percent >= 100 else "<1%" if percent <= 0 and count else f"{percent}%"


def no_rows_accepted(summary: RunSummary) -> str | None:
    """What a run that accepted no row must say, in one sentence, or None if it accepted some:
    "0 of 100 rows accepted; every row was quarantined: value_not_numeric 100%". Its metrics,
    plan and charts are empty, and exit 0 alone would not tell the wrong input from a right one."""
    if summary.accepted > 0:
        return None
    ingested = summary.ingested
    if ingested == 0 and summary.interrupted:  # a stream stopped before its first micro-batch's rows
        return "0 rows accepted: stopped by Ctrl-C before any row was read"
    if ingested == 0:
        return "0 rows accepted: the input has no rows"
    reasons = sorted(summary.counts.reasons.items(), key=lambda item: (-item[1], item[0]))
    shares = ", ".join(f"{reason} {_share(count, ingested)}" for reason, count in reasons)
    return f"0 of {ingested:,} rows accepted; every row was quarantined: {shares}"


def render_report(summary: RunSummary, plan: SlotPlan, previous: PreviousRun | None) -> str:
    """The page for a batch run's `summary`; `previous` is the last run's seconds per task, if known."""
    from rebalancer.pipeline.outputs.summary import BatchFigures

    figures_of = summary.batch or BatchFigures()  # what a batch run adds: hash placement, top types
    after_label = f"{summary.partitioning} (this run)"
    hash_skew = format_skew(figures_of.hash_skew_ratio)
    our_skew = format_skew(summary.skew_ratio)
    empty = no_rows_accepted(summary)
    # No accepted row: no task got any, and every chart would be an empty frame (axes "0, 0, -0").
    charts = [] if empty is not None else _charts(summary, previous, after_label, hash_skew, our_skew)
    rows = [
        ("input", summary.input),
        ("partitioning", summary.partitioning),
        ("partitions", summary.partitions),
        (
            "ingested / accepted / quarantined",
            f"{summary.ingested:,} / {summary.accepted:,} / {summary.quarantined:,}",
        ),
        ("types (sharded)", f"{summary.types:,} ({', '.join(figures_of.sharded_types) or 'none'})"),
        ("skew, max/median task rows", f"{our_skew} this run, {hash_skew} with Spark's hash placement"),
        ("elapsed", f"{summary.elapsed_s:.1f} s (reading to metrics written)"),
        *([(WALL_LABEL, walls)] if (walls := wall_line(summary)) else []),
        ("plan", _plan_line(plan)),
        ("rebalancer version, finished at", f"{figures_of.version}, {figures_of.finished_at}"),
    ]
    table = "".join(f"<tr><th>{html.escape(str(k))}</th><td>{html.escape(str(v))}</td></tr>" for k, v in rows)
    figures = "".join(
        f'<h2>{html.escape(title)}</h2><img alt="{html.escape(title)}" src="data:image/png;base64,{data}">'
        for title, data in charts
    )
    intro = _intro(summary) if empty is None else _empty_intro(empty)
    notes = [uneven_seconds_note(summary), wall_note(summary)] if empty is None else []
    for note in notes:
        if note:
            intro += " " + note
    return (
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>rebalancer pipeline report</title>"
        "<style>body{font-family:sans-serif;max-width:900px;margin:2em auto}"
        "th{text-align:left;padding-right:1em}img{max-width:100%}</style></head><body>"
        f"<h1>rebalancer pipeline report</h1><p>{html.escape(intro)}</p>"
        f"<table>{table}</table>{_handler_table(summary)}{figures}</body></html>\n"
    )


def _empty_intro(empty: str) -> str:
    return (
        f"{empty}. No row reached a Spark task, so there is nothing to chart: the quarantine "
        "(OUTPUT/quarantine/) holds every row with its reason."
    )


def _charts(
    summary: RunSummary, previous: PreviousRun | None, after_label: str, hash_skew: str, our_skew: str
) -> list[tuple[str, str]]:
    """The report's charts, (title, base64 PNG) each."""
    from rebalancer.pipeline.outputs.summary import BatchFigures

    batch = summary.batch or BatchFigures()
    charts: list[tuple[str, str]] = []
    charts.append(
        (
            f"Rows per task: Spark's hash placement (skew {hash_skew}) vs this run (skew {our_skew})",
            _bars(
                [
                    (f"Spark's hash placement, skew {hash_skew}", list(batch.hash_load)),
                    (f"{after_label}, skew {our_skew}", list(summary.task_rows)),
                ],
                "Rows per task (skew = largest task's rows / median task's rows)",
                "rows",
            ),
        )
    )
    seconds: list[tuple[str, list[float]]] = []
    if previous and len(previous.task_seconds) == len(summary.task_seconds):
        seconds.append((f"{previous.partitioning} (previous run)", previous.task_seconds))
    seconds.append((after_label, summary.task_seconds))
    charts.append(
        (
            "Seconds per task: handler seconds, from a task's first group to its last; Spark's own "
            "work (scheduling, the shuffle, starting Python workers) is not counted",
            _bars(seconds, "Handler seconds per task (not Spark's own work)", "seconds"),
        )
    )
    handler_chart = _handler_seconds(summary)
    if handler_chart is not None:
        charts.append(handler_chart)
    top = batch.top_types
    charts.append(
        ("The hottest types", _hbars(list(top), list(top.values()), "Rows of the hottest types", "rows"))
    )
    count_labels = ["ingested", "accepted", "quarantined", *summary.quarantine_reasons]
    count_values: list[float] = [summary.ingested, summary.accepted, summary.quarantined]
    count_values += list(summary.quarantine_reasons.values())
    charts.append(
        (
            "Counts",
            _hbars(
                count_labels,
                count_values,
                "Rows ingested, accepted and quarantined (by reason)",
                "rows (log scale)",
                log=True,
            ),
        )
    )
    return charts


def _handler_table(summary: RunSummary) -> str:
    handlers = summary.routing.user_handlers()
    if not handlers:
        return ""
    head = "".join(
        f"<th>{name}</th>"
        for name in ("handler", "types", "rows", "calls", "split types", "skew, max/median task seconds")
    )
    body = ""
    for name, section in handlers.items():
        cells = [
            name,
            f"{section.types:,}",
            f"{section.rows:,}",
            "" if section.calls is None else f"{section.calls:,}",
            ", ".join(section.split_types or []) or "none",
            format_skew(section.seconds_skew_ratio, SECONDS_NONE),
        ]
        body += "<tr>" + "".join(f"<td>{html.escape(str(cell))}</td>" for cell in cells) + "</tr>"
    unhandled = summary.routing.unhandled
    note = (
        f"<p>{unhandled:,} accepted rows of {len(summary.routing.unhandled_types):,} types matched no handler "
        "and no default: counted as unhandled (summary.json lists them by type).</p>"
        if unhandled
        else "<p>Every accepted row went to a handler.</p>"
    )
    return f"<h2>Handlers</h2><table><tr>{head}</tr>{body}</table>{note}"


def _handler_seconds(summary: RunSummary) -> tuple[str, str] | None:
    series: list[tuple[str, list[float]]] = []
    sections: dict[str, HandlerTotals] = summary.routing.user_handlers()
    for name, section in sections.items():
        if section.task_seconds:
            skew = format_skew(section.seconds_skew_ratio, SECONDS_NONE)
            series.append((f"{name}, skew {skew}", section.task_seconds))
    if not series:
        return None
    return (
        "Seconds per task, by handler",
        _bars(series, "Seconds each task spent in each handler (skew = max / median)", "seconds"),
    )


def _intro(summary: RunSummary) -> str:
    return (
        f"The charts compare how many rows each of the {summary.partitions} Spark tasks processed under "
        "Spark's hash placement of types and under this run's placement, then the seconds each task spent, "
        "the hottest types, and how many rows were accepted or quarantined."
    )


def _plan_line(plan: SlotPlan) -> str:
    placed = sum(1 for _, old, _ in plan.moves if old < 0)
    moved = len(plan.moves) - placed
    line = f"{placed} new items placed, {moved} moved between tasks"
    return line + (f" (moves skipped: {plan.skipped})" if plan.skipped else "")


def write_report(path: OutputPath, summary: RunSummary, plan: SlotPlan, previous: PreviousRun | None) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(render_report(summary, plan, previous))
    tmp.replace(path)
