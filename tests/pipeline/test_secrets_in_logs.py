"""The pattern of the -v finding, in the library's own log records: a run directory's location,
which may be a URI with a user and password (`ftp://USER:PASSWORD@HOST/out`), is logged masked, as
its errors show it. No Spark: the filesystem is a stand-in that records what it is asked to do.
"""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest

import rebalancer.pipeline.outputs.recover as _output_recover
import rebalancer.pipeline.outputs.swap as _output_swap

SECRET = "Zq41Leak"
LOCATION = f"ftp://u:{SECRET}@h/o"


class _FS:
    """RunFS's stand-in: removing works, or fails with an error quoting the location whole."""

    fails = False

    def __init__(self, location: object, spark: object) -> None:
        self.removed: list[object] = []

    def remove(self, where: object) -> None:
        if self.fails:
            raise OSError(f"cannot delete {where}")
        self.removed.append(where)


@pytest.fixture
def warnings(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    monkeypatch.setattr(_output_swap, "RunFS", _FS)
    monkeypatch.setattr(_output_recover, "RunFS", _FS)
    caplog.set_level(logging.WARNING, logger=_output_swap.__name__)
    return caplog


def _state(leftovers: tuple[object, ...] = ()) -> SimpleNamespace:
    return SimpleNamespace(dir=SimpleNamespace(location=LOCATION), leftovers=leftovers)


def test_recovering_a_stopped_runs_staging_logs_the_location_masked(warnings):
    leftover = SimpleNamespace(writer=None, committed=False, swapping=False, has_aside=False,
                               stage=f"{LOCATION}/.rebalancer-staging-t1", token="t1")  # fmt: skip
    assert _output_recover.recover([_state((leftover,))], None) == 1  # type: ignore[list-item]
    assert warnings.messages == [
        "ftp://***@h/o: removed the staging directory of a run that was stopped (t1)"
    ]


def test_a_staging_that_cannot_be_removed_is_logged_masked(warnings, monkeypatch):
    monkeypatch.setattr(_FS, "fails", True)
    run = _output_swap.Outputs.__new__(_output_swap.Outputs)  # only what discard() reads
    run.states = [SimpleNamespace(dir=SimpleNamespace(location=LOCATION, key="k"))]
    run.fs = {"k": _FS(LOCATION, None)}
    run.token = "t2"
    run.created = set()
    run.discard()
    assert warnings.messages == [
        "could not remove ftp://***@h/o/.rebalancer-staging-t2 (cannot delete ftp://***@h/o/.rebalancer-staging-t2); the next run removes it"
    ]
    assert SECRET not in warnings.text
