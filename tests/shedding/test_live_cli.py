"""`rebalancer shedding watch` as a user runs it (a subprocess) against the fake admin API: lines that
fit 80 columns, one stderr line and exit 2 for what a user can fix, Ctrl-C in one line with the
recording readable, and no secret anywhere."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from live_fakes import FakePulsar
from test_live_watch import skewed

from rebalancer.shedding.reports import load_reports

DEADLINE_S = 120
TOKEN = "tok-0f9e8d7c6b5a"


def rebalancer(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rebalancer.cli", *argv], capture_output=True, text=True, timeout=DEADLINE_S,
        env={**os.environ, "COLUMNS": "80", **(env or {})},
    )


def one_line(done: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 2, done.stderr
    # One message: at COLUMNS=80 it wraps at spaces, its continuation lines indented by two.
    lines = done.stderr.splitlines()
    assert lines and all(line.startswith("  ") for line in lines[1:]), done.stderr
    assert all(len(line) <= 80 for line in lines), done.stderr
    return " ".join([lines[0], *(line.strip() for line in lines[1:])])


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def fake():
    with FakePulsar(2) as f:
        yield f


def test_an_unreachable_admin_url_is_one_line_with_its_password_masked():
    port = closed_port()
    line = one_line(rebalancer("shedding", "watch", "--admin-url", f"http://ops:pw-secret@127.0.0.1:{port}"))
    assert line == (
        f"rebalancer: error: admin_url 'http://***@127.0.0.1:{port}': GET /admin/v2/clusters: "
        "cannot connect: Connection refused"
    )


def test_a_url_that_is_no_pulsar_admin_api_is_one_line(fake):
    fake.fault(0, "/admin/v2/clusters", "html")
    line = one_line(rebalancer("shedding", "watch", "--admin-url", fake.admin_url))
    assert line == (
        f"rebalancer: error: admin_url '{fake.admin_url}': GET /admin/v2/clusters: an HTML page (text/html), "
        "not JSON (is it a Pulsar broker's admin API?)"
    )


def test_apply_on_a_cluster_that_sheds_by_itself_is_refused_in_one_line(fake):
    fake.brokers[0].runtime["loadBalancerSheddingEnabled"] = "true"
    line = one_line(rebalancer("shedding", "watch", "--admin-url", fake.admin_url, "--apply", "BalancedShedder"))
    assert line.startswith(
        f"rebalancer: error: refusing to apply BalancedShedder: broker {fake.brokers[0].id} runs Pulsar's own "
        "load shedding (loadBalancerSheddingEnabled=true)"
    )
    assert not [r for r in fake.requests if r.method == "PUT"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--strategy", "AvgShedder,Nope"], "rebalancer: error: unknown strategy 'Nope'; choose one of: "),
        (["--admin-url", "broker-1:8080"], "rebalancer: error: admin_url must be an http:// or https:// URL"),
        (["--token-file", "/nonexistent/token"], "rebalancer: error: --token-file '/nonexistent/token': cannot read"),
        (["--tls-key", "k.pem"], "rebalancer: error: key_file needs cert_file"),
    ],
)
def test_what_a_user_can_fix_is_one_line(argv, message):
    base = ["--admin-url", "http://127.0.0.1:1"]
    line = one_line(rebalancer("shedding", "watch", *base, *argv))
    assert line.startswith(message), line


def test_each_cycle_prints_what_each_strategy_would_unload_in_80_columns(fake, tmp_path):
    namespace = "a-tenant-with-a-rather-long-name/and-a-namespace-name-that-is-long-too"
    for i in range(8):
        fake.put_bundle(0, f"{namespace}/0x{i:08x}_0x{i + 1:08x}", 500 + 100 * i)
    fake.put_bundle(1, "public/t/0xf0000000_0xffffffff", 10)
    fake.brokers[0].cpu = (700.0, 800.0)
    fake.brokers[1].cpu = (80.0, 800.0)
    b0, b1 = fake.brokers[0].id, fake.brokers[1].id
    done = rebalancer("shedding", "watch", "--admin-url", fake.admin_url, "--interval", "0.05", "--cycles", "2",
                      "--record", str(tmp_path / "rec"))
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    lines = done.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    start = next(i for i, line in enumerate(lines) if line.startswith("cycle 1 "))
    assert " ".join(line.strip() for line in lines[:start]) == (
        f"cluster 'fake' at {fake.admin_url}: every 0.05 s, AvgShedder, BalancedShedder; watching only, "
        f"recording to {tmp_path / 'rec'}/"
    )
    body = lines[start:]
    cycle = r"cycle {} at \d\d:\d\d:\d\d: 2 brokers, 9 bundles with load, usage spread 77\.5 points"
    assert re.fullmatch(cycle.format(1), body[0]) and re.fullmatch(cycle.format(2), body[4])
    assert body[1:4] == [
        f"  usage: {b0} 87.5%  {b1} 10.0%",
        "  AvgShedder: nothing to unload",
        "  BalancedShedder: nothing to unload",
    ]
    moves = [f"{namespace}/0x0000000{i}_0x0000000{i + 1}" for i in (7, 6, 5)]
    assert body[5:16] == [
        f"  usage: {b0} 87.5%  {b1} 10.0%",
        "  AvgShedder: 3 to unload",
        *[line for m in moves for line in (f"    {m.rsplit('/', 1)[0]}/", f"      {m.rsplit('/', 1)[1]}:", f"      {b0} -> {b1}")],
    ]
    assert body[16] == "  BalancedShedder: 2 to unload" and len(body) == 23
    assert len(load_reports(tmp_path / "rec")) == 2


def test_ctrl_c_ends_in_one_line_and_the_recording_replays(fake, tmp_path):
    skewed(fake)
    record = tmp_path / "rec"
    process = subprocess.Popen(
        [sys.executable, "-m", "rebalancer.cli", "shedding", "watch", "--admin-url", fake.admin_url,
         "--interval", "0.2", "--record", str(record)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "COLUMNS": "80"},
    )
    try:
        assert process.stdout is not None
        printed = 0
        for line in process.stdout:
            printed += line.startswith("cycle ")
            if printed == 3:
                break
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=DEADLINE_S)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 130
    (line,) = err.splitlines()
    found = re.fullmatch(rf"rebalancer: interrupted after (\d+) cycles; the recording in {re.escape(str(record))}/ is complete", line)
    assert found, line
    cycles = int(found[1])
    assert cycles >= 3
    snapshots = load_reports(record)
    assert cycles <= len(snapshots) <= cycles + 1  # a poll cut short after its file was written
    assert not [p for p in record.iterdir() if p.name.startswith(".")]  # no partial file left
    replayed = rebalancer("shedding", "replay", "--reports", str(record), "--strategy", "BalancedShedder")
    assert replayed.returncode == 0, replayed.stderr


def test_the_token_reaches_the_brokers_and_nothing_shows_it(fake, tmp_path):
    skewed(fake)
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    record = tmp_path / "rec"
    done = rebalancer("-vv", "shedding", "watch", "--admin-url", fake.admin_url, "--token-file", str(token_file),
                      "--interval", "0.05", "--cycles", "3", "--record", str(record), "--apply", "AvgShedder",
                      "--cluster-settings")
    assert done.returncode == 0, done.stderr
    assert {r.headers.get("Authorization") for r in fake.requests} == {f"Bearer {TOKEN}"}
    assert [r.path for r in fake.requests if r.method == "PUT"]  # it acted, token and all
    shown = done.stdout + done.stderr + "".join(p.read_text() for p in record.iterdir())
    assert "the admin token goes to" in done.stderr  # plain http is said, the token is not
    for secret in (TOKEN, "do-not-show-this"):  # the token, and a credential in the brokers' settings
        assert secret not in shown
    # from the environment, when no file names it
    fake.requests.clear()
    done = rebalancer("shedding", "watch", "--admin-url", fake.admin_url, "--cycles", "1",
                      env={"REBALANCER_PULSAR_TOKEN": TOKEN})
    assert done.returncode == 0 and TOKEN not in done.stdout + done.stderr
    assert {r.headers.get("Authorization") for r in fake.requests} == {f"Bearer {TOKEN}"}


def test_the_library_shows_no_secret_in_reprs_errors_or_logs(fake, caplog):
    import logging

    from rebalancer.shedding.live import AdminOptions, SheddingWatch

    caplog.set_level(logging.DEBUG)
    options = AdminOptions(token=TOKEN)
    assert repr(options) == (
        "AdminOptions(token='***', ca_file=None, cert_file=None, key_file=None, verify=True, timeout_s=10.0)"
    )
    with SheddingWatch(fake.admin_url, "AvgShedder", admin=options, interval_s=0.01) as watch:
        list(watch.run(2))
        assert TOKEN not in repr(watch)
    with pytest.raises(ValueError) as both:
        SheddingWatch("http://u:pw-secret@127.0.0.1:1", "AvgShedder", admin=options)
    assert str(both.value) == (
        "admin_url holds a user ('http://***@127.0.0.1:1') and a token is given: use one of them"
    )
    assert not [r for r in caplog.records if TOKEN in r.getMessage() or "pw-secret" in r.getMessage()]
    with pytest.raises(ValueError, match=r"^token must be a non-empty str or None, got <int, hidden>$"):
        AdminOptions(token=123)  # type: ignore[arg-type]
    assert Path(fake.admin_url)  # the fake stayed up
