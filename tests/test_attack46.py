"""Hostile tests (attack 46): `pipeline run --conf/--compare-hash`, the output's width and the help's
extras, attacked knowing only the README and docs/pipeline.md. Each test failed before its fix; its
docstring says what a user saw. (The attack's findings not fixed yet are listed in the stop's note.)

The CLI runs as a subprocess (its real stdout and stderr) wherever the failure is the command's; the
summary's text is rendered from a made summary where that is what fails. Every `stop` runs with its
own XDG_CACHE_HOME and signals only process groups these tests start.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

EXE = str(Path(sys.executable).with_name("rebalancer"))
DEADLINE_S = 300
SECRET = "S3CR3T-attack46"


def _env(cache: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    return {**env, "XDG_CACHE_HOME": str(cache), **extra}


def _cli(*argv: str, env: dict[str, str], cwd: Path, timeout: float = DEADLINE_S) -> subprocess.CompletedProcess[str]:
    return subprocess.run([EXE, *argv], capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout)


# --- pipeline run --conf: malformed pairs ---------------------------------------------------------


@pytest.mark.parametrize(
    "pair",
    [f" spark.hadoop.fs.s3a.secret.key={SECRET}", f"spark.hadoop.fs.s3a.secret.key {SECRET}",
     f"spark.hadoop.fs.s3a.secret.key:{SECRET}"],
    ids=["leading-space", "space-for-equals", "colon-for-equals"],
)  # fmt: skip
def test_a_malformed_conf_never_echoes_a_secret(tmp_path, pair):
    """`--conf " spark.hadoop.fs.s3a.secret.key=…"` (a pasted leading space, or a space or colon for
    the '=') is refused, rightly, but the one error line quotes the whole argument, the secret key's
    value included: `… got ' spark.hadoop.fs.s3a.secret.key=S3CR3T-attack46'`, into a terminal, a CI
    log. Expected: the same one line, exit 2, with the value hidden (the package's rule for secret
    keys, as the Kafka options' errors do)."""
    done = _cli("pipeline", "run", "--output", "out", "--conf", pair, env=_env(tmp_path), cwd=tmp_path, timeout=120)
    assert done.returncode == 2
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("rebalancer pipeline run: error: argument --conf: must be KEY=VALUE")
    assert SECRET not in done.stderr and SECRET not in done.stdout


# --- pipeline run: real Spark runs ---------------------------------------------------------------


@pytest.fixture(scope="module")
def telemetry(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small input, as the README makes one."""
    root = tmp_path_factory.mktemp("attack46")
    data = root / "data"
    done = _cli("pipeline", "generate", "--out", str(data), "--events", "5000", env=_env(root / "cache"), cwd=root)
    assert done.returncode == 0, done.stderr
    return data


def _stream_until_recorded(data: Path, root: Path, *conf: str, master: str = "local[2]") -> dict[str, object]:
    """A stream run (it waits for new files: it does not end by itself) interrupted with Ctrl-C (to
    its whole group, as a terminal sends it) as soon as its JVM's pid file is there: that file, the
    JVM's command line as `ps` shows it to any user, the exit code and both streams."""
    cache = root / "cache"
    pids = cache / "rebalancer" / "pids"
    conf_args = [arg for pair in conf for arg in ("--conf", pair)]
    run = subprocess.Popen(
        [EXE, "pipeline", "run", "--input", str(data), "--output", str(root / "out"), "--stream", "--partitions", "2",
         "--master", master, *conf_args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(cache), cwd=root, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + DEADLINE_S
        files: list[Path] = []
        while not files and run.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
            files = sorted(pids.glob("*.json")) if pids.is_dir() else []
        recorded = files[0].read_text() if files else None
        cmdline = None
        if files:
            try:
                cmdline = Path(f"/proc/{files[0].stem}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                pass
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGINT)
        out, err = run.communicate(timeout=DEADLINE_S)
        return {"recorded": recorded, "cmdline": cmdline, "returncode": run.returncode, "stdout": out, "stderr": err}
    finally:
        try:
            os.killpg(run.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        run.wait()


@pytest.mark.spark
@pytest.mark.timeout(900)
def test_conf_spark_master_does_not_silently_override_master(telemetry, tmp_path):
    """`--master local[2] --conf spark.master=local[1]`: the session runs on local[1], silently (the
    JVM's arguments say `spark.master=local[1]`, summary.json's compare_hash says 1 core, and the
    cores note reads "On 1 cores"). spark-submit, whose --conf the docs say this one follows, lets
    --master win. Expected: --master wins, or the conflict is refused in one line (exit 2)."""
    result = _stream_until_recorded(telemetry, tmp_path, "spark.master=local[1]", master="local[2]")
    if result["recorded"] is None:  # refused before Spark started
        assert result["returncode"] == 2
        lines = str(result["stderr"]).splitlines()
        assert len(lines) == 1 and "--master" in lines[0] and "spark.master" in lines[0]
        return
    assert "spark.master=local[2]" in str(result["recorded"])
    assert "spark.master=local[1]" not in str(result["recorded"])


def _unresolvable_package(telemetry: Path, tmp_path: Path, *verbose: str) -> subprocess.CompletedProcess[str]:
    """A run whose --conf names a package no repository has, and a private repository with a password."""
    tmp_path.mkdir(exist_ok=True)
    return _cli(
        *verbose, "pipeline", "run", "--input", str(telemetry), "--output", str(tmp_path / "out"),
        "--master", "local[1]", "--conf", "spark.jars.packages=org.example.attack46:nothere:1.0",
        "--conf", f"spark.jars.repositories=https://u:{SECRET}@127.0.0.1:9/m",
        "--conf", f"spark.jars.ivy={tmp_path / 'ivy'}",
        env=_env(tmp_path / "cache"), cwd=tmp_path,
    )  # fmt: skip


# --- width ------------------------------------------------------------------------------------------


def test_columns_0_does_not_swallow_the_output(tmp_path):
    """`COLUMNS=0 rebalancer pipeline generate --out DIR --events 100` (a CI runner or a `docker
    exec` without a terminal can export COLUMNS=0) prints nothing at all and exits 0; so do `queue
    demo`, `consumers demo`, `shedding simulate`, `produce demo` and `pipeline run`'s summary. Help
    pages and errors still print. Expected: the same lines as without COLUMNS (an unusable width is
    no width)."""
    unset = _cli("pipeline", "generate", "--out", str(tmp_path / "a"), "--events", "100", env=_env(tmp_path), cwd=tmp_path)
    zero = _cli("pipeline", "generate", "--out", str(tmp_path / "b"), "--events", "100", env=_env(tmp_path, COLUMNS="0"),
                cwd=tmp_path)  # fmt: skip
    assert (zero.returncode, zero.stdout) == (0, unset.stdout.replace(str(tmp_path / "a"), str(tmp_path / "b")))
    assert " ".join(zero.stdout.split()) == f"wrote 100 events in 4 parquet files to {tmp_path / 'b'}"


# --- help: which extra each sub-command needs ----------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "extras"),
    [(["pipeline", "produce"], {"cli", "spark", "kafka"}), (["shedding", "watch"], {"cli", "pulsar"})],
    ids=["pipeline-produce", "shedding-watch"],
)
def test_each_help_names_every_extra_its_command_needs(tmp_path, command, extras):
    """`rebalancer pipeline produce --help` ends `Needs the 'cli' and 'spark' extras: pip install
    'partition-rebalancer[cli,spark]'`; with exactly those installed the command fails `rebalancer
    pipeline produce needs aiokafka, from the 'kafka' extra`. `rebalancer shedding watch --help` ends
    `Needs the 'cli' extra`, while `shedding --help` says "`watch` the 'pulsar' extra" and watch fails
    without httpx (`rebalancer.shedding.live needs httpx, from the 'pulsar' extra`). Expected: the
    help's pip line installs everything the command needs."""
    done = _cli(*command, "--help", env=_env(tmp_path, COLUMNS="80"), cwd=tmp_path, timeout=120)
    assert done.returncode == 0
    installs = re.findall(r"partition-rebalancer\[([a-z,]+)\]", " ".join(done.stdout.split()))
    assert installs, done.stdout
    assert set(installs[-1].split(",")) == extras


# --- pipeline run --conf: secrets, java options, a JVM that exits at start ------------------------


@pytest.fixture(scope="module")
def secret_stream(telemetry: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    root = tmp_path_factory.mktemp("secret-stream")
    return _stream_until_recorded(telemetry, root, f"spark.hadoop.fs.s3a.secret.key={SECRET}")


@pytest.mark.spark
@pytest.mark.timeout(900)
def test_a_conf_secret_is_not_written_to_the_pid_file_nor_shown_by_ps(secret_stream):
    """`rebalancer pipeline run --conf spark.hadoop.fs.s3a.secret.key=…`: while it runs, the JVM's
    pid file (~/.cache/rebalancer/pids/PID.json, left behind by a killed run until the next `stop`)
    holds the secret in its "command", and `ps -ef` shows it to every user of the machine in the
    JVM's arguments (`--conf spark.hadoop.fs.s3a.secret.key=…`). Expected: in neither."""
    assert secret_stream["recorded"] is not None, secret_stream["stderr"]
    assert secret_stream["cmdline"] is not None
    assert {
        "pid file": SECRET in str(secret_stream["recorded"]),
        "ps": SECRET in str(secret_stream["cmdline"]),
    } == {"pid file": False, "ps": False}


@pytest.mark.spark
@pytest.mark.timeout(900)
def test_conf_driver_java_options_reach_the_jvm(telemetry, tmp_path):
    """`--conf "spark.driver.extraJavaOptions=-Dfoo=bar -Dbaz=1"` (a proxy, a trust store, a JVM
    flag) is accepted, and silently dropped: the JVM starts with the project's own
    extraJavaOptions (its log4j file and OUT/spark.log) only, `-Dfoo=bar` nowhere in its arguments.
    The docs: --conf "reaches the session as spark-submit's --conf does". Expected: the user's
    options reach the JVM (beside the project's), or the flag is refused in one line (exit 2)."""
    import json

    result = _stream_until_recorded(telemetry, tmp_path, "spark.driver.extraJavaOptions=-Dfoo=bar -Dbaz=1")
    if result["recorded"] is None:  # refused before Spark started
        assert result["returncode"] == 2
        lines = str(result["stderr"]).splitlines()
        assert len(lines) == 1 and "spark.driver.extraJavaOptions" in lines[0]
        return
    command = json.loads(str(result["recorded"]))["command"]
    assert [any(option in part for part in command) for option in ("-Dfoo=bar", "-Dbaz=1")] == [True, True]


@pytest.mark.spark
@pytest.mark.timeout(900)
@pytest.mark.parametrize("verbose", [[], ["-v"]], ids=["quiet", "v"])
def test_a_repository_password_in_conf_stays_out_of_spark_log_and_stderr(telemetry, tmp_path, verbose):
    """`--conf spark.jars.packages=… --conf spark.jars.repositories=https://user:PASSWORD@host/…` (a
    private Maven repository; docs/pipeline.md suggests --conf spark.jars.packages for hadoop-aws):
    when resolution fails the console shows one line, rightly, but OUT/spark.log, which that line
    points to, holds the password five times (Ivy's `https://u:S3CR3T-attack46@127.0.0.1:9/m added
    as a remote repository`, `Server access error at url https://u:…@…`); with -v those lines go to
    stderr. Expected: the password masked (`***`) in both, as the project masks a URL's password
    elsewhere."""
    done = _unresolvable_package(telemetry, tmp_path, *verbose)
    assert done.returncode == 2, done.stderr
    log = tmp_path / "out" / "spark.log"
    assert {
        "stderr": SECRET in done.stderr,
        "spark.log": log.exists() and SECRET in log.read_text(),
    } == {"stderr": False, "spark.log": False}


@pytest.mark.spark
@pytest.mark.timeout(900)
def test_v_keeps_the_error_line_of_a_jvm_that_exits_at_start(telemetry, tmp_path):
    """Without -v, a package that cannot be resolved ends in `rebalancer: error: Spark: the JVM
    exited at start: [unresolved dependency: org.example.attack46#nothere;1.0: not found] (Spark's
    log: …)`. With -v, the line that ends the same run is `rebalancer: error: Spark:
    [JAVA_GATEWAY_EXITED] Java gateway process exited before sending its port number.`: the cause is
    gone from the one line that sums the failure up. Expected: -v adds output, and ends in the same
    cause."""
    quiet = _unresolvable_package(telemetry, tmp_path / "quiet")
    verbose = _unresolvable_package(telemetry, tmp_path / "verbose", "-v")
    cause = "unresolved dependency: org.example.attack46#nothere;1.0: not found"
    assert (quiet.returncode, verbose.returncode) == (2, 2)
    assert cause in quiet.stderr.splitlines()[-1]
    assert cause in verbose.stderr.splitlines()[-1], verbose.stderr.splitlines()[-1]


# --- width: the run summary at 40 columns ---------------------------------------------------------


def _summary_dict(**extra: object) -> dict:
    return {
        "input": "data/telemetry",
        "output": "/nonexistent/out",
        "partitioning": "weighted",
        "partitions": 4,
        "ingested": 300_000,
        "accepted": 299_700,
        "quarantined": 300,
        "quarantine_reasons": {"value_missing": 300},
        "types": 357,
        "skew_ratio": 1.0,
        "hash_skew_ratio": 1.74,
        "planned_load": [1250, 1250, 1250, 1248],
        "hash_load": [2010, 1000, 1000, 988],
        "task_rows": [1250, 1250, 1250, 1248],
        "task_seconds": [0.5, 0.5, 0.5, 0.5],
        "top_types": {"t0": 500},
        "elapsed_s": 9.0,
        "stage_seconds": {},
        "version": "0.0.0",
        "finished_at": "2026-11-29T01:06:30+00:00",
        **extra,
    }


def _printed(summary: dict, width: int) -> str:
    import io

    from rich.console import Console

    from rebalancer.pipeline.outputs.summary import RunSummary
    from rebalancer.pipeline.terminal import print_summary

    out = io.StringIO()
    print_summary(Console(file=out, width=width, markup=False), RunSummary.from_json(summary), report=False)
    return out.getvalue()


def test_the_run_summary_at_40_columns_keeps_its_words_whole():
    """`COLUMNS=40 rebalancer pipeline run …`: the summary table keeps its 30-character label column
    whole and leaves the values 3 characters, each folded mid-word: `│ dat │ / │ a │`, `│ wei │ /
    │ ght │ / │ ed │`, `5,0 / 00` (165 lines for 20 rows). Other commands' tables turn into `name:
    value` lines when they do not fit. Expected: lines of at most 40 whose words stay whole."""
    text = _printed(_summary_dict(), 40)
    assert max(len(line) for line in text.splitlines()) <= 40
    # A comma splits words, except one between digits (300,000 is one word); the attack's split at
    # every comma could never find "300,000" whole.
    words = set(re.split(r"(?:[\s│┌┐└┘├┤┬┴┼─()]|,(?!\d))+", text))
    assert {"data/telemetry", "weighted", "300,000", "299,700", "value_missing"} <= words
