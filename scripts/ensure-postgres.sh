#!/usr/bin/env bash
# The PostgreSQL sink's tests start a private server with initdb/pg_ctl: install the server with
# apt-get if its binaries are missing. `--jdbc` also installs Debian's JDBC driver
# (/usr/share/java/postgresql.jar), which only the sink benchmark's baseline needs.
set -euo pipefail
want_jdbc=0
[ "${1:-}" = "--jdbc" ] && want_jdbc=1
have_server() { compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || command -v initdb >/dev/null; }
have_jdbc() { [ -f /usr/share/java/postgresql.jar ]; }
packages=()
have_server || packages+=(postgresql)
[ "$want_jdbc" -eq 0 ] || have_jdbc || packages+=(libpostgresql-jdbc-java)
[ "${#packages[@]}" -eq 0 ] && exit 0
if ! command -v apt-get >/dev/null; then
  echo "make: the PostgreSQL sink needs ${packages[*]} and apt-get is missing; install them and retry" >&2
  exit 1
fi
sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "make: installing ${packages[*]} with apt-get" >&2
$sudo apt-get update -qq
# The tests and the benchmark start their own server on a free port; a packaged one may also run.
$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null
have_server || { echo "make: apt-get installed postgresql but initdb is still missing" >&2; exit 1; }
[ "$want_jdbc" -eq 0 ] || have_jdbc || { echo "make: /usr/share/java/postgresql.jar is still missing" >&2; exit 1; }
