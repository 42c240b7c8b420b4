"""The examples in docs/balance.md run, and print what their comments say."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "balance.md"


def test_docs_examples_print_what_they_claim():
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    assert len(blocks) == 3
    for block in blocks:
        lines = [line for line in block.splitlines() if line.lstrip().startswith("print(") and "#" in line]
        expected = [line.split("#", 1)[1].strip() for line in lines]
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(block, str(DOC), "exec"), {})
        printed = out.getvalue().splitlines()
        assert len(printed) == len(expected)
        for got, want in zip(printed, expected, strict=True):
            # A comment starts with what is printed, or elides its tail with "...".
            assert want.startswith(got) or ("..." in want and got.startswith(want.split("...")[0])), (
                got,
                want,
            )
