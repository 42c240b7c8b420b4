"""The usage example in docs/consumers.md runs, and prints what its comments say."""

from __future__ import annotations

import contextlib
import io
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "consumers.md"


def _blocks(needs: str | None) -> list[str]:
    """The python blocks, those marked `<!-- needs: X -->` (X given) or those without a marker (None)."""
    found = re.findall(r"(<!-- needs: (\w+) -->\n)?```python\n(.*?)```", DOC.read_text(), flags=re.S)
    return [code for _, need, code in found if (need or None) == needs]


@pytest.mark.kafka_real
def test_the_kafka_example_runs_on_real_brokers(kafka_real_cluster: Any, tmp_path: Path) -> None:
    (block,) = _blocks("kafka")
    script = tmp_path / "example.py"
    script.write_text(block)
    env = {**os.environ, "KAFKA_BOOTSTRAP": kafka_real_cluster.bootstrap_servers}
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["processed 1000 records"]


def test_docs_examples_run_and_print_what_they_claim():
    blocks = _blocks(None)
    assert len(blocks) == 2
    for block in blocks:
        expected = [line.split("#", 1)[1].strip() for line in block.splitlines() if line.startswith("print(")]
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(block, str(DOC), "exec"), {})
        assert out.getvalue().splitlines() == expected
