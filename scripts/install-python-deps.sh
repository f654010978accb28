#!/usr/bin/env bash
# Installs the Python test environment of the reference writer
# (clients/python) and the schema checks (schema/validate.py): a venv under
# $OUTBOX_CACHE_DIR/python with the pinned clients/python/requirements-test.txt
# (boto3, pytest, jsonschema and their dependencies). Prints the venv's
# python.
#
# Usage: scripts/install-python-deps.sh
#   OUTBOX_CACHE_DIR  cache root (default: <repo>/.cache)
#   PYTHON            the interpreter to build the venv from (default python3, >= 3.9)
#
# Idempotent and safe to run concurrently (test binaries of several packages
# may call it at once on a fresh machine): when the venv holds exactly the
# pinned requirements (a stamp with their hash) it only prints the path;
# otherwise it installs under a lock (flock), and only a finished install
# writes the stamp. Exit status: 0 on success; 1 with a message on stderr
# (make test then fails: it never skips the Python writer's tests).
set -euo pipefail

die() {
	printf 'install-python-deps: %s\n' "$*" >&2
	exit 1
}

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cache_root=${OUTBOX_CACHE_DIR:-$repo_root/.cache}
venv=$cache_root/python
req=$repo_root/clients/python/requirements-test.txt
py=${PYTHON:-python3}

command -v "$py" >/dev/null 2>&1 || die "$py not found on PATH: install Python 3.9 or later (python3 and its venv module)"
"$py" -c 'import sys; sys.exit(sys.version_info < (3, 9))' || die "$py is $("$py" --version 2>&1); the writer needs Python 3.9 or later"

want=$(sha256sum "$req" | cut -d' ' -f1)
stamp=$venv/.requirements.sha256
if [[ -x $venv/bin/python && -f $stamp && $(cat "$stamp") == "$want" ]]; then
	printf '%s\n' "$venv/bin/python"
	exit 0
fi

mkdir -p "$cache_root" || die "cannot create $cache_root (set OUTBOX_CACHE_DIR to a writable directory)"
# A venv names its own path in its scripts and cannot be moved into place:
# take a lock, and look again once holding it.
exec 9>"$cache_root/.python-deps.lock"
flock 9
if [[ -x $venv/bin/python && -f $stamp && $(cat "$stamp") == "$want" ]]; then
	printf '%s\n' "$venv/bin/python"
	exit 0
fi
rm -rf "$venv"
"$py" -m venv "$venv" || die "could not create a venv at $venv (on Debian/Ubuntu: apt-get install python3-venv)"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-input -r "$req" >&2 ||
	die "pip could not install $req from PyPI (is https://pypi.org reachable? a proxy in HTTPS_PROXY/PIP_INDEX_URL?)"
"$venv/bin/python" -c 'import boto3, jsonschema, pytest' || die "the venv at $venv cannot import boto3, jsonschema and pytest"
printf '%s\n' "$want" >"$stamp"
printf '%s\n' "$venv/bin/python"
