"""The Pulsar harness's JVM does not outlive the process that started it (issue 42 item 11's pattern):
it lived on its stdin pipe, which a child the owner had forked kept open after the owner was SIGKILLed."""

from __future__ import annotations

from pathlib import Path

import pytest

import pulsar_conformance
from process_helpers import killed_owner, wait_gone

pytestmark = [pytest.mark.pulsar, pytest.mark.timeout(240)]

# The owner imports the harness's Python side from conformance/, as pytest's `pythonpath` has it.
_CONFORMANCE = str(Path(pulsar_conformance.__file__).parent)
_START = """
import sys
sys.path.insert(0, sys.argv[1])
from pulsar_conformance import PulsarHarness
harness = PulsarHarness()
assert "unknown strategy nope" in harness.run([{"id": "", "strategy": "nope"}])[0]["error"]  # up and answering
report = {"jvm": harness._process.pid, "pids": [harness._process.pid]}
"""


def test_a_killed_owner_with_a_live_forked_child_leaves_no_harness_jvm_behind() -> None:
    with killed_owner(_START, _CONFORMANCE) as info:
        # Before the fix the JVM waited on its stdin as long as the child lived; a generous bound.
        assert wait_gone([info["jvm"]], timeout_s=60) == []
