"""One Pulsar version everywhere: the harness's pom, the conformance module, the ports' docstrings and
docs/shedding.md name the same pulsar-broker."""

from __future__ import annotations

import re

from pulsar_conformance import HARNESS_DIR, PULSAR_VERSION, REPO
from rebalancer.shedding import model, pulsar
from rebalancer.shedding.pulsar import transfer_shedder as transfer


def test_the_pinned_version_is_the_one_cited():
    pom = (HARNESS_DIR / "pom.xml").read_text(encoding="utf-8")
    assert re.search(r"<pulsar\.version>([^<]+)</pulsar\.version>", pom).group(1) == PULSAR_VERSION
    for module in (pulsar, transfer, model):
        assert f"Pulsar {PULSAR_VERSION}" in (module.__doc__ or "").replace("apache/pulsar", "Pulsar"), module
    docs = (REPO / "docs" / "shedding.md").read_text(encoding="utf-8")
    assert f"`org.apache.pulsar:pulsar-broker` **{PULSAR_VERSION}**" in docs
