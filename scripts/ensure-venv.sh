#!/usr/bin/env bash
# Create the virtualenv; on Debian, python3 -m venv needs python3-venv, which apt provides.
set -euo pipefail
python=${1:-python3}
venv=${2:-.venv}
if "$python" -m venv "$venv" 2>/dev/null; then exit 0; fi
rm -rf "$venv"
if command -v apt-get >/dev/null; then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  ver=$("$python" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq "python${ver}-venv" >/dev/null 2>&1 || $sudo apt-get install -y -qq python3-venv >/dev/null
  exec "$python" -m venv "$venv"
fi
echo "make: cannot create $venv: '$python -m venv' failed and apt-get is not available" >&2
exit 1
