"""Human output that fits the terminal, for the command modules (they print; the library logs).

The width is rich's console width: `COLUMNS` when set, else the terminal's, else 80. A table whose
cells do not fit side by side (headers may wrap at spaces, cells never) is printed vertically instead,
one block per row, so that no line is wider than the terminal and no number is cut.
"""

from __future__ import annotations

import os
import shutil
import textwrap
from collections.abc import Iterable, Sequence

from rich import box
from rich.console import Console
from rich.measure import Measurement
from rich.table import Column, Table
from rich.text import Text

_UNBOUNDED = 1_000_000  # columns: a width no table reaches


def usable_width() -> int | None:
    """None (rich reads COLUMNS or the terminal), unless COLUMNS is set to something no line fits in
    (0, negative, not a number): then the terminal's width, else 80. rich took COLUMNS=0 as a width
    of 0 and printed nothing, as some CI runners and `docker exec` export it."""
    columns = os.environ.get("COLUMNS")
    if columns is None:
        return None
    try:
        if int(columns) > 0:
            return None
    except ValueError:
        pass
    return shutil.get_terminal_size((80, 24)).columns


def console(*, stderr: bool = False) -> Console:
    """A console without markup or highlighting: what we print is plain text, brackets included."""
    return Console(markup=False, highlight=False, stderr=stderr, width=usable_width())


def _cell_width(text: str) -> int:
    return max((len(line) for line in text.splitlines()), default=0)


def build_table(headers: Sequence[str], rows: Sequence[Sequence[str]], *, right: Sequence[str] = (),
                wrap: Sequence[str] = (), show_lines: bool = False, compact: bool = False) -> Table:
    """Each column as wide as its widest cell or its header's longest word: headers wrap at spaces,
    cells do not, except in the columns named in `wrap`, whose cells take about three lines.
    Columns named in `right` are right-justified. `compact`: a rule under the header and two spaces
    between columns, no frame (a grid of short numbers in 80 columns)."""
    columns = []
    for i, header in enumerate(headers):
        words = header.split()
        widest = _cell_width(max((r[i] for r in rows), key=_cell_width, default=""))
        if header in wrap:
            words += [w for r in rows for w in r[i].split()]
            widest = -(-widest // 3)
        widest_word = max((len(w) for w in words), default=0)
        width = max(widest_word, widest)
        columns.append(Column(header, justify="right" if header in right else "left", width=width))
    if compact:
        t = Table(*columns, show_lines=show_lines, box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False,
                  collapse_padding=True)  # fmt: skip
    else:
        t = Table(*columns, show_lines=show_lines)
    for r in rows:
        t.add_row(*r)
    return t


def fits(out: Console, t: Table) -> bool:
    """Whether `t` fits side by side: its width as rich lays it out (columns, padding, rules and
    edges), measured without the console's width as a cap, which rich's own measurement applies."""
    unbounded = out.options.update_width(_UNBOUNDED)
    return Measurement.get(out, unbounded, t).maximum <= out.width


def print_table(out: Console, title: str, headers: Sequence[str], rows: Iterable[Sequence[str]], *,
                right: Sequence[str] = (), wrap: Sequence[str] = (), show_lines: bool = False,
                keys: int = 1, compact: bool = False) -> None:
    """A titled table; vertical when too narrow: per row a heading (its first `keys` cells), then one
    `header: value` line per other cell.

    The title is printed above the table, wrapped at the console's width: a rich table title would
    wrap at the table's own width, mid-phrase.
    """
    rows = [list(r) for r in rows]
    t = build_table(headers, rows, right=right, wrap=wrap, show_lines=show_lines, compact=compact)
    print_wrapped(out, title, style="bold")
    if fits(out, t):
        out.print(t)
        return
    print_vertical(out, headers, rows, keys)


def print_vertical(out: Console, headers: Sequence[str], rows: Sequence[Sequence[str]], keys: int = 1) -> None:
    """Each row as its first `keys` cells, then one indented `header: value` line per other cell; a
    two-column (name, value) table as one `name: value` line per row."""
    if len(headers) == 2 and keys == 1:
        for name, value in rows:
            print_wrapped(out, f"{name}: {value}", hang="  ")
        return
    label = max((len(h) for h in headers[keys:]), default=0) + 1
    for r in rows:
        heading = f"{headers[0]}: {r[0]}" if keys == 1 else " — ".join(r[:keys])
        print_wrapped(out, heading, hang="  ")
        for header, value in zip(headers[keys:], r[keys:]):
            print_wrapped(out, f"{header + ':':<{label}} {value}", indent="  ", hang=" " * (label + 3))


def print_wrapped(out: Console, text: str, indent: str = "", hang: str | None = None,
                  style: str | None = None) -> None:
    """`text` wrapped at spaces to the console's width, continuation lines indented by `hang`.

    Never at a hyphen, so `over-placement` or a flag stays whole; a word longer than the line (a
    file's path) stays whole on a line of its own, so that it can be copied, and the terminal folds it.
    """
    hang = indent if hang is None else hang
    width = max(out.width, len(hang) + 10)
    lines = textwrap.wrap(text, width, initial_indent=indent, subsequent_indent=hang,
                          break_on_hyphens=False, break_long_words=False) or [""]
    for line in lines:
        out.print(Text(line, style=style or ""), soft_wrap=True)


def print_items(out: Console, prefix: str, items: Sequence[str], indent: str, sep: str = "  ",
                style: str | None = None) -> None:
    """`prefix` then `items` joined by `sep`, breaking lines only between items (an item such as
    `c1 [0, 1, 2]` stays on one line); continuation lines start at `indent`."""
    width = out.width
    line = indent + prefix
    first = True
    for item in items:
        candidate = line + ("" if first else sep) + item
        if len(candidate) <= width or first:
            line, first = candidate, False
            continue
        print_wrapped(out, line, hang=indent + "  ", style=style)
        line = indent + "  " + item
    print_wrapped(out, line, hang=indent + "  ", style=style)
