"""The runnable examples in docs/shedding.md run, and print what their comments say."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_docs_examples_print_what_they_claim(monkeypatch):
    monkeypatch.chdir(ROOT)  # the examples name examples/ relative to the repository
    blocks = [
        b
        for b in re.findall(r"```python\n(.*?)```", (ROOT / "docs" / "shedding.md").read_text(), re.S)
        if "print(" in b
    ]
    assert len(blocks) == 3  # the usage example opens the page
    for block in blocks:
        expected = [line.split("#", 1)[1].strip() for line in block.splitlines() if line.startswith("print(")]
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(block, "docs/shedding.md", "exec"), {})
        assert out.getvalue().splitlines() == expected
