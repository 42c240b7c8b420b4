"""What `rebalancer pipeline run` prints: its stages as they run (a live line, or a line each in a
pipe), then the run's summary table."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rebalancer._secrets import shown_location
from rebalancer.pipeline.outputs.manifest import REPORT_FILES
from rebalancer.pipeline.paths import join, local_path

if TYPE_CHECKING:
    from rebalancer.pipeline.outputs.summary import RunSummary

log = logging.getLogger(__name__)


@contextmanager
def stages(
    console: Any, quiet: bool = False, clock: Callable[[], float] = time.perf_counter
) -> Iterator[Callable[[str], None]]:
    """A reporter for `run`'s stages: a live line on a terminal; in a pipe a line as each stage starts
    and one as it ends with its seconds (a log keeps each stage's time); nothing with `quiet` (the
    summary alone)."""
    if quiet:
        yield lambda stage: log.info("stage: %s", stage)
        return
    if not console.is_terminal:
        with _stage_lines(console, clock) as step:
            yield step
        return
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    # Transient: the summary lists every stage's seconds, labelled, once the run is over.
    with Progress(
        SpinnerColumn(),
        TextColumn("{task.description}", markup=False),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as bar:
        current: list[Any] = []

        def step(stage: str) -> None:
            log.info("stage: %s", stage)
            if current:
                bar.update(current[-1], completed=1)
                bar.stop_task(current[-1])
            current.append(bar.add_task(stage, total=1))

        yield step
        if current:
            bar.update(current[-1], completed=1)
            bar.stop_task(current[-1])


@contextmanager
def _stage_lines(console: Any, clock: Callable[[], float]) -> Iterator[Callable[[str], None]]:
    """`stage: NAME ...` as each stage starts and `stage: NAME done (S s)` as it ends: a pipe has no
    live line to redraw, and a long stage must not look like silence."""
    current: list[tuple[str, float]] = []

    def finish() -> None:
        if current:
            stage, began = current.pop()
            console.print(f"stage: {stage} done ({clock() - began:.1f} s)", highlight=False, soft_wrap=True)

    def step(stage: str) -> None:
        log.info("stage: %s", stage)
        finish()
        console.print(f"stage: {stage} ...", highlight=False, soft_wrap=True)
        current.append((stage, clock()))

    yield step
    finish()  # not after a failure: its one error line says what went wrong


def written(summary: RunSummary, names: tuple[str, ...], report_dir: str | Path | None, report: bool) -> list[str]:
    """The outputs among `names`, as the user would open them. A remote output is listed, not looked
    at: the session that could reach it has stopped."""
    found = []
    for name in names:
        in_reports = name in REPORT_FILES
        if in_reports and name == "report.html" and (not report or summary.stream is not None):
            continue  # --no-report, or a stream (it writes no report)
        base: str | Path = report_dir if report_dir is not None and in_reports else summary.output
        shown = shown_location(join(base, name))  # a URI's password as ***
        local = local_path(base)
        if local is None:
            found.append(shown + ("" if in_reports else "/"))
        elif (local / name).exists():
            found.append(shown + ("/" if (local / name).is_dir() else ""))
    return found


def fit(phrases: list[str], width: int) -> str:
    """`phrases` joined by spaces into lines of at most `width`, broken only between phrases (a
    phrase longer than the line keeps a line of its own): "6.71 with Spark's hash" stays whole.
    A phrase may start with a space, for two between it and the one before on the same line."""
    lines: list[str] = []
    for phrase in phrases:
        if lines and len(lines[-1]) + 1 + len(phrase) <= width:
            lines[-1] += " " + phrase
        else:
            lines.append(phrase.lstrip())
    return "\n".join(lines)


def _listed(items: list[str]) -> list[str]:
    """`a, b, c` as phrases, each keeping its comma."""
    return [item + "," for item in items[:-1]] + items[-1:]


def print_summary(
    console: Any, summary: RunSummary, report_dir: str | Path | None = None, report: bool = True
) -> None:
    """This run against Spark's hash placement, the files written, and where the report is.

    A value given as lines of phrases is wrapped here, to the console's width, between phrases:
    rich would wrap at any space, splitting "with Spark's / hash" across lines."""
    from rich.table import Table

    from rebalancer.pipeline.outputs.report import WALL_LABEL, format_skew, wall_note, wall_phrases

    quarantined = [f"{summary.quarantined:,}"]
    if summary.quarantined:
        reasons = _listed([f"{k} {v:,}" for k, v in summary.quarantine_reasons.items()])
        quarantined += [f" ({reasons[0]}", *reasons[1:]]
        quarantined[-1] += ")"
    rows: list[tuple[str, str | list[list[str]]]] = [
        ("input", summary.input),
        ("partitioning", f"{summary.partitioning} over {summary.partitions} tasks"),
        ("rows ingested", f"{summary.ingested:,}"),
        ("accepted", f"{summary.accepted:,}"),
        ("quarantined", [quarantined]),
        ("types", str(summary.types)),
    ]
    if summary.stream is not None:
        rows.insert(2, ("micro-batches", str(summary.stream.batches)))
    batch = summary.batch
    if batch is not None and batch.hash_load:
        ours = f"this run ({summary.partitioning})"
        rows += [
            (
                "skew, max/median task rows",
                [[f"{format_skew(summary.skew_ratio)} {ours},", f"{format_skew(batch.hash_skew_ratio)} with Spark's hash"]],
            ),
            (
                "largest task, rows",
                [[f"{max(batch.planned_load):,} planned,", f"{max(batch.hash_load):,} with Spark's hash"]],
            ),
        ]
    else:
        rows.append(("skew, max/median task rows", format_skew(summary.skew_ratio)))
    elapsed = [f"{summary.elapsed_s:.1f} s"]
    stage_seconds = dict(batch.stage_seconds) if batch is not None else {}
    compared = summary.compare_hash
    if stage_seconds and compared and compared.get("passes_s") is not None:
        stage_seconds["compare-hash passes"] = float(compared["passes_s"])
    # In tenths of a second, as shown, so that the parts shown add up to the total shown.
    tenths = {name: round(sec * 10) for name, sec in stage_seconds.items()}
    if tenths:
        # Every part named: what the stages do not cover (Spark's start of the read, the summary) is "other".
        rest = round(summary.elapsed_s * 10) - sum(tenths.values())
        if rest >= 1:
            tenths["other"] = rest
    stages = _listed([f"{name.replace('_', ' ')} {part // 10}.{part % 10}" for name, part in tenths.items()])
    if stages:
        elapsed += [f" ({stages[0]}", *stages[1:]]
        elapsed[-1] += ")"
    rows.append(("elapsed", [elapsed]))
    walls = wall_phrases(summary)
    if walls:
        rows.append((WALL_LABEL, [walls]))
    lines = handler_lines(summary)
    if lines:
        rows.append(("handlers", [_listed(line.split(", ")) for line in lines]))
    names = (
        "metrics",
        *[h for h in summary.routing.handlers if h != "metrics"],
        "quarantine",
        "summary.json",
        "plan.json",
        "report.html",
    )
    files = written(summary, names, report_dir, report)
    rows.append(("files written", "\n".join(files)))
    if summary.sink:
        from rebalancer.pipeline.sinks.outputs import describe

        rows.append(("database", describe(summary.sink)))
    label = max(len(what) for what, _ in rows)
    width = console.width - label - 7  # 7: the borders and padding of two columns
    if width < _narrowest_value(rows):
        _print_rows(console, TITLE, rows)  # the values would be folded mid-word
    else:
        table = Table(title=TITLE, show_header=False)
        table.add_column("what", style="bold", no_wrap=True)
        table.add_column("value", overflow="fold")
        for what, value in rows:
            table.add_row(what, value if isinstance(value, str) else "\n".join(fit(line, width) for line in value))
        console.print(table)
    note = wall_note(summary)
    if note:
        console.print(note, highlight=False)
    page = next((file for file in files if file.endswith("report.html")), None)
    if page is not None:
        console.print(f"report: {page}  (open it in a browser)", highlight=False)


TITLE = "rebalancer pipeline"
# The value column's least width: the longest word a value holds that is not a location (a path or
# URL, which may be folded as rich folds it), and never less than this.
MIN_VALUE_WIDTH = 20
_LOCATION_ROWS = ("input", "files written", "database")


def _narrowest_value(rows: list[tuple[str, str | list[list[str]]]]) -> int:
    """The width under which the summary's values cannot be shown as a table without folding a word."""
    words = [
        word
        for what, value in rows
        if what not in _LOCATION_ROWS
        for text in ([value] if isinstance(value, str) else [" ".join(line) for line in value])
        for word in text.split()
    ]
    return max([MIN_VALUE_WIDTH, *(len(word) for word in words)])


def _print_rows(console: Any, title: str, rows: list[tuple[str, str | list[list[str]]]]) -> None:
    """The summary as `label: value` lines wrapped at spaces, for a console too narrow for its table
    (as `rebalancer._console.print_table` prints other commands' tables); a value of several lines
    (handlers, files) as indented lines under its label."""
    from rebalancer._console import print_wrapped

    print_wrapped(console, title, style="bold")
    for what, value in rows:
        lines = value.splitlines() if isinstance(value, str) else [" ".join(line) for line in value]
        if len(lines) <= 1:
            print_wrapped(console, f"{what}: {''.join(lines)}", hang="  ")
            continue
        print_wrapped(console, f"{what}:")
        for line in lines:
            print_wrapped(console, line, indent="  ", hang="    ")


def handler_lines(summary: RunSummary) -> list[str]:
    """One line per handler (types, rows, calls, task-seconds skew) and the unhandled rows, if any."""
    from rebalancer.pipeline.outputs.report import SECONDS_NONE, format_skew

    routing = summary.routing
    if set(routing.handlers) <= {"metrics"} and not routing.unhandled:
        return []
    lines = []
    for name, section in routing.handlers.items():
        line = f"{name}: {section.types} types, {section.rows:,} rows"
        if section.calls is not None:
            line += f", {section.calls:,} calls"
        if section.task_rows is not None or section.seconds_skew_ratio is not None:
            skew = format_skew(section.seconds_skew_ratio, SECONDS_NONE)
            line += f", skew {skew} (max/median task seconds)"
        lines.append(line)
    if routing.unhandled:
        lines.append(f"unhandled: {routing.unhandled:,} rows of {len(routing.unhandled_types)} types")
    return lines
