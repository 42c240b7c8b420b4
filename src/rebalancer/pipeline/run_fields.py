"""The settings of a pipeline run, in one table: `RunRequest` checks its fields by it, and
`rebalancer pipeline run` defines its flags by it.

Each setting names its `RunRequest` field, its flags, the values it takes, and what it is for (a
stream, weighted placement, files, a kafka:// input, `--handlers`). `RunRequest` checks every
field by this table, once, when it is made; the command only converts a flag's text (`1.5`, `nan`
and `abc` reach the check as 1.5, nan and 'abc') and leaves every refusal to `RunRequest`. So a bad
value is refused in the same words from Python and on the command line: `kafka-timeout must be a
finite number > 0, got nan`, named by its flag.

A setting that its run would ignore is refused too (`max-moves: is for a stream (--stream), got
3`), when its value differs from `RunRequest`'s default: a default is what the run does anyway,
so the command, which always passes every flag, and a program that leaves a field out are alike.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from rebalancer._numbers import parse_float, parse_int, shown
from rebalancer._secrets import shown_location
from rebalancer.balance.checks import is_int, is_number
from rebalancer.pipeline.apply import COSTS
from rebalancer.pipeline.checks import COUNT_MAX, SECONDS_MAX, check_int, check_partitions
from rebalancer.pipeline.handler.dispatch import PARTITIONINGS
from rebalancer.pipeline.ingest.contract import FORMATS, Input, column_mapping
from rebalancer.pipeline.outputs.mode import OUTPUT_MODES
from rebalancer.pipeline.paths import check_location, location_argument

if TYPE_CHECKING:
    import argparse

__all__ = ["SETTINGS", "USES", "Setting", "check_settings", "flag_text", "numeric_fields", "plain_number"]


class Request(Protocol):
    """What a setting's use is judged by (`RunRequest`)."""

    @property
    def stream(self) -> bool: ...

    @property
    def partitioning(self) -> str: ...

    @property
    def handlers(self) -> object: ...

    @property
    def is_kafka(self) -> bool: ...


# What a setting is for: the words that refuse it elsewhere, and whether this request is such a run.
USES: dict[str, tuple[str, Callable[[Request], bool]]] = {
    "stream": ("is for a stream (--stream)", lambda r: r.stream),
    "batch": ("is for a batch run, not a stream (--stream)", lambda r: not r.stream),
    "weighted": ("is for --partitioning weighted (hash placement ignores it)", lambda r: r.partitioning == "weighted"),
    "files": ("is for an input of files, not a kafka:// topic", lambda r: not r.is_kafka),
    "kafka": ("is for a kafka:// input", lambda r: r.is_kafka),
    "handlers": ("is for --handlers (it places their types)", lambda r: r.handlers is not None),
}


def flag_text(text: str) -> object:
    """A numeric flag's text as the number it spells (an int if it is one), else the text itself:
    the check then refuses `1.5`, `nan` or `abc` in the words it uses for a program's value."""
    try:
        return parse_int(text, field="value")
    except ValueError:
        pass
    try:
        return parse_float(text, field="value", finite=False)
    except ValueError:
        return text


def _location_text(text: str) -> object:
    """A path, or a URI kept as written; an empty text stays '' for the check to refuse (a Path
    would make it '.', the working directory)."""
    return location_argument(text) if text else text


def _path_text(text: str) -> object:
    """A local path; '' stays '' for the check to refuse."""
    return Path(text) if text else text


class Rule(Protocol):
    """The values a setting takes: `check` raises ValueError naming `label` and the value."""

    def check(self, label: str, value: object) -> None: ...


@dataclass(frozen=True)
class Integer:
    """An int (numpy's too; a bool or a round float is no count) in minimum..maximum; None if `optional`."""

    minimum: int
    maximum: int = COUNT_MAX
    optional: bool = False

    def check(self, label: str, value: object) -> None:
        if not (self.optional and value is None):
            check_int(value, label, self.minimum, self.maximum)


@dataclass(frozen=True)
class Partitions:
    """A task count (`check_partitions`, the one check `balanced_apply` makes too); None: the
    session's default parallelism."""

    def check(self, label: str, value: object) -> None:
        if value is not None:
            check_partitions(value, label)


@dataclass(frozen=True)
class Number:
    """A finite int or float (numpy's too; nan passes every `<` check, so it is refused by name) above
    `minimum`, at most `maximum`."""

    minimum: float
    maximum: float
    exclusive: bool = False
    optional: bool = False

    def check(self, label: str, value: object) -> None:
        if self.optional and value is None:
            return
        if (
            not is_number(value)
            or not math.isfinite(value)
            or (value <= self.minimum if self.exclusive else value < self.minimum)
            or value > self.maximum
        ):
            bound = f"{'>' if self.exclusive else '>='} {self.minimum:g} and at most {self.maximum:g}"
            raise ValueError(f"{label} must be a finite number {bound}, got {value!r}")


@dataclass(frozen=True)
class OneOf:
    """One of the words in `choices`; None if `optional`."""

    choices: tuple[str, ...]
    optional: bool = False

    def check(self, label: str, value: object) -> None:
        if not (self.optional and value is None) and (not isinstance(value, str) or value not in self.choices):
            raise ValueError(f"{label} must be one of {', '.join(self.choices)}, got {value!r}")


@dataclass(frozen=True)
class Switch:
    """True or False: a truthy 1 or "yes" is refused, as the command's flags give only bools."""

    def check(self, label: str, value: object) -> None:
        if not isinstance(value, bool):
            raise ValueError(f"{label} must be True or False, got {value!r}")


@dataclass(frozen=True)
class Location:
    """A local path or a URI (str or Path); `input` also takes an `Input` already inspected."""

    optional: bool = False
    inspected: bool = False

    def check(self, label: str, value: object) -> None:
        if self.optional and value is None:
            return
        if isinstance(value, os.PathLike) or (isinstance(value, str) and value):
            check_location(label, value)
            return
        if self.inspected and isinstance(value, Input):
            return
        what = "a path or a URI (str or Path)" + (", or an inspected input" if self.inspected else "")
        raise ValueError(f"{label} must be {what}, got {shown(value)}")


@dataclass(frozen=True)
class Instance:
    """An object of `module`'s `name`, imported only when a value is given; `secret`: never shown
    (a sink's URL holds a password)."""

    module: str
    name: str
    hint: str
    secret: bool = False

    def check(self, label: str, value: object) -> None:
        if value is None:
            return
        import importlib

        if not isinstance(value, getattr(importlib.import_module(self.module), self.name)):
            raise ValueError(f"{label} must be a {self.name} ({self.hint}), got {shown(value, secret=self.secret)}")


@dataclass(frozen=True)
class Columns:
    """Contract column -> the input's name for it (`--columns`' text, parsed), or None."""

    def check(self, label: str, value: object) -> None:
        if value is None:
            return
        if not isinstance(value, Mapping) or not all(isinstance(v, str) for v in (*value, *value.values())):
            raise ValueError(f"{label} must map column names to the input's names (str to str), got {shown(value)}")
        column_mapping(value)  # its own words: an unknown column, an empty name, a name mapped twice


@dataclass(frozen=True)
class Setting:
    """One field of `RunRequest` and its flag(s). `uses`: what it is for (keys of USES); a value
    other than the default is refused in a run that is not. `inverted`: the flag sets False."""

    name: str
    rule: Rule
    flags: tuple[str, ...] = ()
    uses: tuple[str, ...] = ()
    text: Callable[[str], object] = flag_text  # the flag's text -> the field's value
    metavar: str | None = None
    inverted: bool = False

    @property
    def label(self) -> str:
        """The name errors give: the flag's, without dashes."""
        return self.name.replace("_", "-")

    def add_to(self, parser: argparse.ArgumentParser, default: object, help: str, **options: Any) -> None:
        """This setting's flag on `parser` (dest: the field's name), its text converted, not checked."""
        if isinstance(self.rule, Switch):
            options.setdefault("action", "store_true")
            default = not default if self.inverted else default
        else:
            options.setdefault("type", self.text)
            metavar = self.metavar or ("{" + ",".join(self.rule.choices) + "}" if isinstance(self.rule, OneOf) else None)
            options.setdefault("metavar", metavar)
        parser.add_argument(*self.flags, dest=self.dest, default=default, help=help, **options)

    @property
    def dest(self) -> str:
        """Where argparse keeps the flag: the field's name (`no_report` for --no-report)."""
        return f"no_{self.name}" if self.inverted else self.name

    def value(self, args: argparse.Namespace) -> object:
        """The field's value from the parsed flags."""
        value = getattr(args, self.dest)
        return not value if self.inverted else value


# Every field of RunRequest, in its order (a test holds them equal); a field without flags is set
# by the command itself, from another flag (`columns` from --columns' text).
SETTINGS: dict[str, Setting] = {
    s.name: s
    for s in (
        Setting("input", Location(inspected=True), ("--input",), text=_location_text),
        Setting("output", Location(), ("--out", "--output"), text=_location_text),
        Setting("partitions", Partitions(), ("--partitions",), metavar="N"),
        Setting("partitioning", OneOf(PARTITIONINGS), ("--partitioning",), text=str),
        Setting(
            "handlers",
            Instance("rebalancer.pipeline.routing.handler_map", "Pipeline", "rebalancer.pipeline.Pipeline"),
            ("--handlers",),
            text=_path_text,
            metavar="FILE.py",
        ),
        Setting("cost", OneOf(COSTS), ("--cost",), uses=("handlers",), text=str),
        Setting("mode", OneOf(OUTPUT_MODES), ("--mode",), text=str),
        Setting("plan_from", Location(optional=True), ("--plan-from",), ("batch", "weighted"), _location_text, "PATH"),
        Setting("format", OneOf(FORMATS, optional=True), ("--format",), ("files",), text=str),
        Setting("columns", Columns(), ("--columns",), text=str, metavar="NAME=SOURCE,..."),
        Setting("stream", Switch(), ("--stream",)),
        Setting("rebalance_every", Integer(1), ("--rebalance-every",), ("stream", "weighted"), metavar="N"),
        Setting("max_moves", Integer(0, optional=True), ("--max-moves",), ("stream", "weighted"), metavar="N"),
        Setting("max_batches", Integer(1, optional=True), ("--max-batches",), ("stream",), metavar="N"),
        Setting("files_per_batch", Integer(1), ("--files-per-batch",), ("stream", "files"), metavar="N"),
        Setting("available_now", Switch(), ("--available-now",), ("stream",)),
        Setting("checkpoint", Location(optional=True), ("--checkpoint",), ("stream",), _location_text),
        Setting("group_cost", Integer(0), ("--group-cost",), ("batch", "weighted"), metavar="ROWS"),
        Setting("report", Switch(), ("--no-report",), inverted=True),
        Setting("report_dir", Location(optional=True), ("--report-dir",), text=_location_text),
        Setting(
            "sink",
            Instance("rebalancer.pipeline.sinks", "PostgresSink", "opened from a URL", secret=True),
            ("--sink",),
            text=str,
        ),
        Setting("kafka_timeout", Number(0, SECONDS_MAX, exclusive=True, optional=True), ("--kafka-timeout",), ("kafka",), metavar="SECONDS"),
        Setting("compare_hash", Switch(), ("--compare-hash",)),
    )
}


def plain_number(value: object) -> object:
    """A number of numpy's as Python's own (np.int64(5) -> 5, np.float32(0.5) -> 0.5), so that a
    request holds, shows and passes on plain values; anything else as it is."""
    if is_int(value):
        return int(value)
    if is_number(value) and not isinstance(value, int | float):
        return float(value)
    return value


def numeric_fields() -> tuple[str, ...]:
    """The fields holding a number (their rule is Integer or Number)."""
    return tuple(name for name, s in SETTINGS.items() if isinstance(s.rule, Integer | Number | Partitions))


def check_settings(request: Request, defaults: Mapping[str, object]) -> None:
    """Every field's value by its rule, then every setting this run would ignore (one differing from
    its entry in `defaults`); the first refusal is a ValueError naming the setting's flag. Numeric
    fields are checked as the plain numbers `RunRequest` stores (`plain_number`)."""
    for setting in SETTINGS.values():
        setting.rule.check(setting.label, getattr(request, setting.name))
    for setting in SETTINGS.values():
        value = getattr(request, setting.name)
        if value == defaults[setting.name]:
            continue
        for use in setting.uses:
            words, applies = USES[use]
            if not applies(request):
                raise ValueError(f"{setting.label}: {words}, got {shown_location(value) if isinstance(value, str) else value}")
