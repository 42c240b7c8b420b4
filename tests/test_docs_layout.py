"""Docs a person can read (issue 38): each component doc opens with what it is for, a runnable example
and an API table, and benchmark logs live in docs/benchmarks/, one page per benchmark script.

"The opening" of a doc is every line before its first detail section. The first detail section is the
first `## ` heading after the doc's API heading, the first `## ` heading with the word "API" in it.
Headings inside fenced code blocks do not count."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
COMPONENT_DOCS = sorted(DOCS.glob("*.md"))
BENCHMARKS = sorted((ROOT / "benchmarks").glob("*.py"))
MAX_OPENING = 150


def headings(lines: list[str]) -> list[tuple[int, str]]:
    """(index, line) of every `## ` heading outside code fences."""
    found, fenced = [], False
    for i, line in enumerate(lines):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith("## "):
            found.append((i, line))
    return found


def opening(lines: list[str]) -> tuple[list[str], list[str]]:
    """(the opening, its API section)."""
    sections = headings(lines)
    api = next(n for n, (_, line) in enumerate(sections) if re.search(r"\bAPI\b", line))
    end = sections[api + 1][0] if api + 1 < len(sections) else len(lines)
    return lines[:end], lines[sections[api][0] : end]


def test_every_component_doc_and_every_benchmark_is_there():
    assert [p.stem for p in COMPONENT_DOCS] == [
        "balance", "consumers", "pipeline", "produce", "queue", "shedding", "testing"
    ]
    assert len(BENCHMARKS) >= 10


@pytest.mark.parametrize("doc", COMPONENT_DOCS, ids=lambda p: p.name)
def test_a_component_doc_opens_with_its_purpose_an_example_and_the_api(doc: Path):
    lines = doc.read_text().splitlines()
    assert lines[0].startswith("# ")
    first_section = headings(lines)[0][0]
    prose = [line for line in lines[1:first_section] if line.strip() and not line.startswith(("```", "!["))]
    assert prose, f"{doc.name}: no word on what it is for before its first section"
    head, api = opening(lines)
    assert len(head) <= MAX_OPENING, f"{doc.name}: {len(head)} lines before its first detail section"
    assert any(re.match(r"```(python|bash|sh)$", line) for line in head), f"{doc.name}: no example"
    assert any(re.match(r"\|[ :]*-{3,}", line) for line in api), f"{doc.name}: no API table"


@pytest.mark.parametrize("doc", COMPONENT_DOCS, ids=lambda p: p.name)
def test_benchmark_logs_are_not_in_the_component_docs(doc: Path):
    logs = [line for line in doc.read_text().splitlines() if line.strip().startswith("RESULT ")]
    assert logs == [], f"{doc.name} holds RESULT lines: they belong in docs/benchmarks/"


@pytest.mark.parametrize("script", BENCHMARKS, ids=lambda p: p.name)
def test_every_benchmark_has_a_page_with_its_latest_result_and_how_to_reproduce_it(script: Path):
    page = DOCS / "benchmarks" / f"{script.stem}.md"
    assert page.is_file(), f"no docs/benchmarks/{script.stem}.md"
    text = page.read_text()
    assert text.startswith("# ") and "## Reproduce\n" in text and "## Latest result\n" in text
    reproduce = text.split("## Reproduce\n", 1)[1].split("\n## ", 1)[0]
    assert f"benchmarks/{script.stem}.py" in reproduce
    latest = text.split("## Latest result\n", 1)[1].split("\n## ", 1)[0]
    assert re.search(r"^RESULT \w+=", latest, re.M)
    component = re.search(r"\]\(\.\./(\w+\.md)\)", text)
    assert component and (DOCS / component.group(1)).is_file()


def test_links_to_benchmark_pages_resolve():
    for doc in [*COMPONENT_DOCS, ROOT / "README.md"]:
        for target in re.findall(r"\]\(((?:docs/)?benchmarks/[\w.]+\.md)", doc.read_text()):
            base = ROOT if target.startswith("docs/") else DOCS
            assert (base / target).is_file(), (doc.name, target)


def test_the_readme_first_screen_holds_the_problem_the_report_and_the_two_commands() -> None:
    """Read in an 80x24 terminal, before the first scroll (a line wider than 80 columns takes more rows).
    The report is the one `make run` writes, linked: a committed picture of it went stale (issue 46)."""
    rows, screen = 0, []
    for line in (ROOT / "README.md").read_text().splitlines():
        rows += max(1, -(-len(line) // 80))
        if rows > 24:
            break
        screen.append(line)
    text = "\n".join(screen)
    assert "hot partitions" in text  # the problem
    assert "](out/report.html)" in text
    assert "report.png" not in (ROOT / "README.md").read_text()
    assert re.search(r"^make run\b", text, re.M) and re.search(r"^make test\b", text, re.M)
