"""The usage example in docs/consumers.md runs, and prints what its comments say."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "consumers.md"


def test_docs_examples_run_and_print_what_they_claim():
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    assert len(blocks) == 2
    for block in blocks:
        expected = [line.split("#", 1)[1].strip() for line in block.splitlines() if line.startswith("print(")]
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(block, str(DOC), "exec"), {})
        assert out.getvalue().splitlines() == expected
