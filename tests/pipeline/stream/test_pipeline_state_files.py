"""Issue 33 follow-up: JSON state read back from disk is checked before it is used.

The batch run's plan.json and summary.json (stickiness and the report's comparison) are only hints:
a damaged or wrongly-shaped one is ignored with one warning naming the file, as `PlanStore` does.
The stream's checkpoint state is not a hint: it holds the last batch applied (what keeps a replayed
batch from being counted twice) and the run's totals, so a damaged one is refused in one line naming
the file, never replaced by an empty state. No Spark: these are the readers alone.
"""

from __future__ import annotations

import json
import logging

import pytest

from rebalancer.pipeline.ingest.contract import RowCounts as StreamTotals
from rebalancer.pipeline.plan_from import load_previous_plan, load_previous_summary
from rebalancer.pipeline.stream.state import STATE_VERSION, StreamData, StreamState, _empty_state

DAMAGED = [
    "{not json",  # cut short by a crash, or edited by hand
    "[1, 2, 3]",  # JSON, but not an object
    '"text"',
    "null",
    "\udcff",  # not UTF-8 once written (surrogateescape)
]


def _write(path, text: str) -> None:
    path.write_bytes(text.encode("utf-8", "surrogateescape"))


@pytest.mark.parametrize("text", DAMAGED)
def test_a_damaged_plan_is_ignored_with_one_warning_naming_it(tmp_path, caplog, text):
    _write(tmp_path / "plan.json", text)
    with caplog.at_level(logging.WARNING, logger="rebalancer"):
        assert load_previous_plan(tmp_path, 4) is None
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, caplog.text
    assert str(tmp_path / "plan.json") in warnings[0].getMessage()


@pytest.mark.parametrize(
    "saved",
    [
        {"partitions": 4, "items": [1, 2]},  # rows that are not objects
        {"partitions": 4, "items": [{"type": "a"}]},  # no slot
        {"partitions": 4, "items": [{"type": "a", "shard": "x", "slot": 0}]},
        {"partitions": 4, "items": "a"},
    ],
)
def test_a_wrongly_shaped_plan_is_ignored_with_one_warning(tmp_path, caplog, saved):
    _write(tmp_path / "plan.json", json.dumps(saved))
    with caplog.at_level(logging.WARNING, logger="rebalancer"):
        assert load_previous_plan(tmp_path, 4) is None
    assert [r.levelno for r in caplog.records] == [logging.WARNING], caplog.text
    assert str(tmp_path / "plan.json") in caplog.records[0].getMessage()


def test_a_missing_plan_or_one_for_other_partitions_is_not_a_warning(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="rebalancer"):
        assert load_previous_plan(tmp_path, 4) is None
        _write(tmp_path / "plan.json", json.dumps({"partitions": 8, "items": []}))
        assert load_previous_plan(tmp_path, 4) is None  # made for another run's settings: not damaged
        _write(tmp_path / "plan.json", json.dumps({"partitions": 4, "items": [{"type": "a", "shard": None, "slot": 2}]}))
        assert load_previous_plan(tmp_path, 4) == {("a", -1): 2}
    assert caplog.records == []


@pytest.mark.parametrize("text", [*DAMAGED, '{"task_seconds": "slow"}', '{"task_seconds": [1, "x"]}'])
def test_a_damaged_previous_summary_is_ignored_with_one_warning(tmp_path, caplog, text):
    _write(tmp_path / "summary.json", text)
    with caplog.at_level(logging.WARNING, logger="rebalancer"):
        assert load_previous_summary(tmp_path) is None
    assert [r.levelno for r in caplog.records] == [logging.WARNING], caplog.text
    assert str(tmp_path / "summary.json") in caplog.records[0].getMessage()


def test_a_previous_summary_is_read_and_a_missing_one_is_no_warning(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="rebalancer"):
        assert load_previous_summary(tmp_path) is None
        _write(tmp_path / "summary.json", json.dumps({"partitioning": "hash", "task_seconds": [1.5, 2]}))
        assert load_previous_summary(tmp_path) == {"partitioning": "hash", "task_seconds": [1.5, 2]}
    assert caplog.records == []


def _state_file(tmp_path):
    return tmp_path / "rebalancer" / "state.json"


@pytest.mark.parametrize("text", DAMAGED)
def test_a_damaged_stream_state_is_refused_naming_the_file(tmp_path, text):
    path = _state_file(tmp_path)
    path.parent.mkdir()
    _write(path, text)
    with pytest.raises(ValueError) as info:
        StreamState(path, 4)
    message = str(info.value)
    assert message.startswith(f"checkpoint state {path} cannot be used: "), message
    assert message.endswith("; restore it, or start with a new --checkpoint"), message
    assert "\n" not in message
    assert path.read_bytes() == text.encode("utf-8", "surrogateescape")  # left as it was, for a look


@pytest.mark.parametrize(
    "change",
    [
        lambda state: state.pop("last_batch_id"),
        lambda state: state.update(totals=[]),
        lambda state: state.update(batches="3"),
        lambda state: state.update(task_rows=[0, 0]),  # not one per partition
        lambda state: state["totals"].pop("accepted"),
    ],
)
def test_a_wrongly_shaped_stream_state_is_refused_naming_the_file(tmp_path, change):
    path = _state_file(tmp_path)
    path.parent.mkdir()
    state = _empty_state(4)
    change(state)
    _write(path, json.dumps(state))
    with pytest.raises(ValueError, match=rf"^checkpoint state {path} cannot be used: "):
        StreamState(path, 4)


def test_a_missing_stream_state_starts_empty_and_a_saved_one_is_read_back(tmp_path):
    path = _state_file(tmp_path)
    state = StreamState(path, 4)
    assert state.data == StreamData.empty(4) and state.data.to_json() == _empty_state(4)
    state.data.batches = 3
    state.data.last_batch_id = 2
    state.save()
    assert StreamState(path, 4).data.last_batch_id == 2
    # The checks that were there stay: another version, other partitions.
    assert json.loads(path.read_text())["version"] == STATE_VERSION
    with pytest.raises(ValueError, match="partitions must match the checkpoint's 4, got 8"):
        StreamState(path, 8)


def test_a_checkpoint_state_written_as_a_dict_loads_and_is_written_back_unchanged(tmp_path):
    """The typed state reads a state.json of the dict days (every optional key, and one it does not
    know) and saves the same JSON, key order included: a checkpoint survives the change both ways."""
    path = _state_file(tmp_path)
    path.parent.mkdir()
    written = {
        **_empty_state(2),
        "last_batch_id": 4,
        "batches": 5,
        "plans": 2,
        "owner": [{"type": "a", "shard": None, "slot": 1}, {"type": "b", "shard": 0, "slot": 0}],
        "sharded": ["b"],
        "shard_of": {"b": {"3": 0}},
        "window_type_counts": {"a": 7},
        "window_bucket_counts": [["b", 3, 9]],
        "totals": {"ingested": 20, "accepted": 18, "quarantined": 2, "reasons": {"ts_missing": 2}},
        "type_totals": {"a": 9, "b": 9},
        "task_rows": [9, 9],
        "task_seconds": [0.5, 0.25],
        "moves": 1,
        "last_plan": {"batch_id": 3, "partitions": 2},
        "sink": {"rows": 18},
        "handlers": {"metrics": {"types": 2, "rows": 18, "calls": 0, "seen_types": ["a", "b"]}},
        "unhandled_types": {},
        "progress": [{"batches": 5, "batch_id": 4, "rows": 4}],
        "from_a_newer_writer": [1],
    }
    text = json.dumps(written, indent=2) + "\n"
    path.write_text(text)
    state = StreamState(path, 2)
    assert state.data.totals == StreamTotals(20, 18, 2, {"ts_missing": 2})
    assert (state.data.batches, state.data.sink, state.data.extra) == (5, {"rows": 18}, {"from_a_newer_writer": [1]})
    assert list(state.data.to_json()) == list(written) and state.data.to_json() == written
    state.save()
    assert json.loads(path.read_text()) == written
    assert list(json.loads(path.read_text())) == list(written)
