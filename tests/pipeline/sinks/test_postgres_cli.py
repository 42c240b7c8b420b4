"""`rebalancer pipeline run --sink`: every bad sink is one line on stderr, exit 2, and never the password."""

from __future__ import annotations

import json

import pytest

from rebalancer.cli import main

pytestmark = pytest.mark.postgres
PASSWORD = "N0t-in-any-0utput"


def _fails_cleanly(capsys, argv: list[str], message: str, secret: str) -> None:
    assert main(argv) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert len(err.splitlines()) == 1, err
    assert message in err, err
    assert secret not in captured.err + captured.out


def test_an_unreachable_server_or_a_bad_login_exits_2_before_spark(dataset, postgres, tmp_path, capsys):
    input_dir, _ = dataset
    out = tmp_path / "out"
    run = ["pipeline", "run", "--input", str(input_dir), "--output", str(out), "--sink"]
    _fails_cleanly(capsys, [*run, f"postgresql://rebalancer:{PASSWORD}@127.0.0.1:1/rebalancer"],
                   "rebalancer: error: sink postgresql://***@127.0.0.1:1/rebalancer: cannot connect:", PASSWORD)
    wrong_password = postgres.url.replace(postgres._password, PASSWORD)
    _fails_cleanly(capsys, [*run, wrong_password], "password authentication failed", PASSWORD)
    missing_db = postgres.url.rsplit("/", 1)[0] + "/no_such_db"
    _fails_cleanly(capsys, [*run, missing_db], 'database "no_such_db" does not exist', postgres._password)
    _fails_cleanly(capsys, [*run, f"mysql://u:{PASSWORD}@h/db"], "sink must be a postgresql://", PASSWORD)
    assert not out.exists()


@pytest.mark.spark
def test_an_incompatible_table_exits_2_and_a_good_sink_is_in_the_summary(
    spark, dataset, postgres, pg_schema, pg_connect, tmp_path, capsys
):
    input_dir, _ = dataset
    pg_connect.execute(f"CREATE SCHEMA {pg_schema}")
    pg_connect.execute(f"CREATE TABLE {pg_schema}.metrics (type text, entity text, minute text, PRIMARY KEY (type))")
    run = ["pipeline", "run", "--input", str(input_dir), "--no-report", "--partitions", "2",
           "--sink", postgres.url, "--sink-schema", pg_schema]
    _fails_cleanly(capsys, [*run, "--output", str(tmp_path / "bad")],
                   f"sink table {pg_schema}.metrics exists with incompatible columns: "
                   "column 'minute' is text, expected timestamp with time zone", postgres._password)
    assert not (tmp_path / "bad" / "metrics").exists()  # refused before any work

    pg_connect.execute(f"DROP TABLE {pg_schema}.metrics")
    assert main([*run, "--output", str(tmp_path / "good")]) == 0
    captured = capsys.readouterr()
    assert "database" in captured.out and "rows upserted" in captured.out
    assert postgres._password not in captured.out + captured.err
    summary = json.loads((tmp_path / "good" / "summary.json").read_text())
    rows = pg_connect.execute(f"SELECT count(*) FROM {pg_schema}.metrics").fetchone()[0]
    assert summary["sink"]["tables"]["metrics"]["rows"] == rows > 0
