"""`rebalancer pipeline postgres`: a private PostgreSQL server to try the sink with."""

from __future__ import annotations

import argparse
from typing import Any

from rebalancer._args import integer, local_path


def add_postgres_parser(sub: Any) -> None:
    postgres = sub.add_parser(
        "postgres",
        help="start or stop a private PostgreSQL server, to try --sink",
        description="A private PostgreSQL server on 127.0.0.1 in one directory (rebalancer.testing.LocalPostgres). "
        "Its --sink URL, password included, is written to DIR/sink-url (mode 0600), never printed.",
    )
    postgres.add_argument("action", choices=("start", "stop"), help="start: initialise DIR if needed and start; stop: stop it")
    postgres.add_argument("--dir", type=local_path, required=True, help="the server's directory (created by start)")
    postgres.add_argument("--port", type=integer(minimum=1), default=None, help="the server's port (default: a free port)")
    postgres.set_defaults(func=cmd_postgres)


def cmd_postgres(args: argparse.Namespace) -> int:
    from rebalancer._extras import require_extra

    # Before the server's directory is made: without psycopg it failed after initdb, in a traceback.
    require_extra("rebalancer pipeline postgres", "postgres", ("psycopg",))
    from rebalancer.testing.postgres import URL_FILE, LocalPostgres

    server = LocalPostgres(args.dir, port=args.port)
    if args.action == "stop":
        server.stop()
        print(f"stopped the PostgreSQL server in {server.directory}")
        return 0
    server.start(detach=True)  # the server outlives this command, until `postgres stop`
    print(f"PostgreSQL listening on 127.0.0.1:{server.port} as {server.display_url}")
    print(f'its --sink URL (password included) is in {server.directory / URL_FILE}: --sink "$(cat {server.directory / URL_FILE})"')
    return 0
