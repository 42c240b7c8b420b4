"""A private PostgreSQL server on 127.0.0.1 in one directory: for tests, benchmarks and trying `--sink`.

PostgreSQL refuses to run as root, so under root every server command runs as the `postgres` user
(`runuser -u postgres --`) and the directory is handed to that user. The password is generated and
kept in `DIR/sink-url` (mode 0600), never printed.

    rebalancer pipeline postgres start --dir /tmp/rebalancer-pg
    rebalancer pipeline run --sink "$(cat /tmp/rebalancer-pg/sink-url)"
    rebalancer pipeline postgres stop --dir /tmp/rebalancer-pg

A test peer, as `MockKafkaCluster` is (it was `rebalancer.pipeline.sinks.local.LocalPostgres`, which
still imports). A server started by `start()` lives as long as the process that started it: if that
process dies without `stop()` (SIGKILL, even while a child it forked lives on), a watchdog stops the
server (`pg_ctl stop -m immediate`) and removes what `start()` created; so does dropping the last
reference to a started `LocalPostgres`. `start(detach=True)` (the CLI's `postgres start`) leaves the
server running until `stop()`.
"""

from __future__ import annotations

import glob
import logging
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
from pathlib import Path
from types import TracebackType
from urllib.parse import quote

from rebalancer._numbers import parse_int
from rebalancer._pidfiles import forget, record
from rebalancer._watchdog import Watchdog

log = logging.getLogger(__name__)

SERVER_USER = "postgres"
URL_FILE = "sink-url"
SERVER_LOG = "server.log"
_INITDB_PASSWORD_FILE = ".initdb-pw"
# Durability is pointless for a throw-away test server; the benchmark keeps the defaults.
FAST_SETTINGS = ("fsync=off", "synchronous_commit=off", "full_page_writes=off")


def server_bindir() -> Path:
    """The newest `/usr/lib/postgresql/<major>/bin` with initdb, else the directory of `initdb` on PATH."""

    def major(path: str) -> int:
        # Not isdigit(): it passes '²' (which int() then refuses) and reads '١٧' as 17.
        try:
            return parse_int(Path(path).parent.parent.name, field="PostgreSQL major version")
        except ValueError:
            return 0  # not a version directory: sorted first

    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=major)
    if found:
        return Path(found[-1]).parent
    on_path = shutil.which("initdb")
    if on_path:
        return Path(on_path).parent
    raise FileNotFoundError(
        "PostgreSQL server binaries (initdb, pg_ctl) not found; run scripts/ensure-postgres.sh"
    )


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _bind_failed(server_log: Path, start: int) -> bool:
    """Whether the server's log, from `start` on, says its port was taken."""
    try:
        with open(server_log, "rb") as lines:
            lines.seek(start)
            return b"Address already in use" in lines.read()
    except OSError:
        return False


class LocalPostgres:
    """initdb + pg_ctl in `directory`, listening on 127.0.0.1 only; a context manager that stops it."""

    def __init__(
        self,
        directory: str | Path,
        port: int | None = None,
        user: str = "rebalancer",
        database: str = "rebalancer",
        fast: bool = False,
    ) -> None:
        self.directory = Path(directory).absolute()
        self.port = port or free_port()
        self._port_chosen = not port  # a port this class chose may be retried on another; a given one not
        self.user = user
        self.database = database
        self.fast = fast
        self._password = secrets.token_urlsafe(18)
        self._as_server: list[str] = []
        self._watchdog: Watchdog | None = None
        if os.geteuid() == 0:
            try:
                pwd.getpwnam(SERVER_USER)
            except KeyError as exc:
                raise ValueError(
                    f"running as root needs a '{SERVER_USER}' user to run PostgreSQL as"
                ) from exc
            self._as_server = [shutil.which("runuser") or "runuser", "-u", SERVER_USER, "--"]
        self.bindir = server_bindir()

    @property
    def data_dir(self) -> Path:
        return self.directory / "data"

    @property
    def url(self) -> str:
        """The connection URL, password included: pass it on, never log it."""
        return (
            f"postgresql://{quote(self.user, safe='')}:{quote(self._password, safe='')}"
            f"@127.0.0.1:{self.port}/{quote(self.database, safe='')}"
        )

    @property
    def display_url(self) -> str:
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/{self.database}"

    def __repr__(self) -> str:
        return f"LocalPostgres({self.display_url!r}, directory={str(self.directory)!r})"

    def _run(self, *args: str) -> None:
        result = subprocess.run([*self._as_server, *args], capture_output=True, text=True, check=False)
        if result.returncode != 0:
            detail = (result.stderr or result.stdout).strip().splitlines()
            raise RuntimeError(f"{Path(args[0]).name} failed: {detail[-1] if detail else result.returncode}")

    def _hand_over(self, path: Path) -> None:
        if self._as_server:
            entry = pwd.getpwnam(SERVER_USER)
            os.chown(path, entry.pw_uid, entry.pw_gid)

    def start(self, *, detach: bool = False) -> str:
        """Create the cluster and database if needed, start the server, and return `url`.

        The server stops if this process dies without `stop()`, unless `detach` (then only `stop()`,
        from any process, stops it). A start that fails stops what it started.
        """
        if (self.data_dir / "postmaster.pid").exists():
            raise ValueError(f"a PostgreSQL server is already running in {self.directory}; stop it first")
        created = self._paths_start_creates()
        self.directory.mkdir(parents=True, exist_ok=True)
        self.directory.chmod(0o700)
        self._hand_over(self.directory)
        if (
            self._as_server
            and subprocess.run([*self._as_server, "test", "-w", str(self.directory)], check=False).returncode
        ):
            raise ValueError(
                f"{self.directory} must be reachable by the '{SERVER_USER}' user: its parent directories need o+x"
            )
        if self._watchdog is not None:  # a server that ended on its own: its watchdog must not stop this one
            self._watchdog.stop()
            self._watchdog = None
        if not detach:  # before initdb and pg_ctl: a death while they run is cleaned up too
            self._watchdog = Watchdog(commands=[[*self._as_server, *self._pg_ctl_stop("immediate")]], remove=created)
        try:
            self._init_cluster()
            self._start_server()
            if (pid := self._server_pid()) is not None:  # for `rebalancer stop`; SIGINT: a fast shutdown
                record(pid, f"PostgreSQL in {self.directory} on 127.0.0.1:{self.port}", group=False,
                       stop_signal=signal.SIGINT)  # fmt: skip
            self._write_url()
            self._create_database()
        except BaseException:
            try:
                self.stop()
            except RuntimeError as exc:  # the start's own error is the one to raise
                log.warning("PostgreSQL in %s: stopping after a failed start failed too: %s", self.directory, exc)
            raise
        log.info("PostgreSQL started: %s", self.display_url)
        return self.url

    def _paths_start_creates(self) -> list[Path]:
        """What start() is about to create, for the watchdog to remove: the directory if it is new, else
        the cluster and the files start() writes if they are new; nothing of a cluster that exists."""
        if not self.directory.exists():
            return [self.directory]
        if self.data_dir.exists():
            return []
        written = (self.data_dir, self.directory / URL_FILE, self.directory / SERVER_LOG)
        return [path for path in (*written, self.directory / _INITDB_PASSWORD_FILE) if not path.exists()]

    def _init_cluster(self) -> None:
        """initdb, if the directory holds no cluster yet; else the existing cluster's password."""
        if (self.data_dir / "PG_VERSION").exists():
            self._read_password()
            return
        pwfile = self.directory / _INITDB_PASSWORD_FILE
        pwfile.write_text(self._password + "\n")
        pwfile.chmod(0o600)
        self._hand_over(pwfile)
        try:
            self._run(
                str(self.bindir / "initdb"),
                "-D",
                str(self.data_dir),
                "-U",
                self.user,
                "--pwfile",
                str(pwfile),
                "-A",
                "scram-sha-256",
                "-E",
                "UTF8",
                "--locale",
                "C",
                "--no-sync",
            )
        finally:
            pwfile.unlink(missing_ok=True)
        self._write_url()

    def _start_server(self) -> None:
        """pg_ctl start; a port chosen here and taken before the server bound it is retried once on a new one."""
        server_log = self.directory / SERVER_LOG
        for attempt in (1, 2):
            log_start = server_log.stat().st_size if server_log.exists() else 0
            options = f"-p {self.port} -k {self.directory} -c listen_addresses=127.0.0.1"
            if self.fast:
                options += "".join(f" -c {setting}" for setting in FAST_SETTINGS)
            try:
                self._run(
                    str(self.bindir / "pg_ctl"), "-D", str(self.data_dir), "-w", "-t", "60",
                    "-l", str(server_log), "-o", options, "start",
                )  # fmt: skip
                return
            except RuntimeError:
                if attempt == 2 or not self._port_chosen or not _bind_failed(server_log, log_start):
                    raise
                log.warning("PostgreSQL: port %d was taken between choosing and binding it; retrying on a new port",
                            self.port)  # fmt: skip
                self.port = free_port()

    def _write_url(self) -> None:
        path = self.directory / URL_FILE
        path.touch(mode=0o600, exist_ok=True)
        path.chmod(0o600)
        path.write_text(self.url + "\n")

    def _read_password(self) -> None:
        """A restart of an existing directory keeps its password (from the URL file)."""
        from psycopg.conninfo import conninfo_to_dict  # the 'postgres' extra: loaded on use

        saved = conninfo_to_dict((self.directory / URL_FILE).read_text().strip())
        self._password = str(saved.get("password", ""))

    def _create_database(self) -> None:
        import psycopg  # the 'postgres' extra: loaded on use

        admin = self.url.rsplit("/", 1)[0] + "/postgres"
        with psycopg.connect(admin, autocommit=True, connect_timeout=10) as conn:
            exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (self.database,)).fetchone()
            if not exists:
                from psycopg import sql  # the 'postgres' extra: loaded on use

                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(self.database)))

    def _pg_ctl_stop(self, mode: str) -> list[str]:
        return [str(self.bindir / "pg_ctl"), "-D", str(self.data_dir), "-w", "-m", mode, "stop"]

    def _server_pid(self) -> int | None:
        """The running server's pid, from the first line of its postmaster.pid."""
        try:
            return int((self.data_dir / "postmaster.pid").read_text().split("\n", 1)[0])
        except (OSError, ValueError):
            return None

    def stop(self) -> None:
        """Stop the server (a fast shutdown: sessions are ended) and its watchdog; the files stay."""
        try:
            if (self.data_dir / "postmaster.pid").exists():
                pid = self._server_pid()
                self._run(*self._pg_ctl_stop("fast"))
                if pid is not None:
                    forget(pid)
                log.info("PostgreSQL stopped: %s", self.display_url)
        finally:
            watchdog, self._watchdog = self._watchdog, None
            if watchdog is not None:
                watchdog.stop()

    def __enter__(self) -> LocalPostgres:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
