#!/usr/bin/env bash
# Installs kafka-python (a pure-Python Kafka client from PyPI, the
# third-party consumer that checks what the relay published to a real broker:
# integration/testdata/thirdparty_consumer.py) into a virtualenv in the cache
# directory and prints the virtualenv's python.
#
# Usage: scripts/install-kafka-python.sh
#   OUTBOX_CACHE_DIR  cache root (default: <repo>/.cache); the virtualenv goes
#                     to $OUTBOX_CACHE_DIR/kafka-python/<versions>/
#
# Idempotent and safe to run concurrently: a virtualenv names its own path in
# its scripts and cannot be renamed into place, so runs take a lock (flock)
# and only a finished one writes the READY marker.
# Exit status: 0 on success; 1 with a message on stderr naming what to install.
set -euo pipefail

readonly PKG=kafka-python
readonly PKG_VERSION=3.0.12
# The relay compresses with lz4 by default; kafka-python decodes it with the
# lz4 bindings (a wheel from PyPI).
readonly LZ4_VERSION=4.4.5

die() {
	printf 'install-kafka-python: %s\n' "$*" >&2
	exit 1
}

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cache_root=${OUTBOX_CACHE_DIR:-$repo_root/.cache}
base=$cache_root/kafka-python
dest=$base/$PKG_VERSION-lz4-$LZ4_VERSION

if [[ -f $dest/READY && -x $dest/venv/bin/python ]]; then
	printf '%s\n' "$dest/venv/bin/python"
	exit 0
fi

command -v python3 >/dev/null 2>&1 ||
	die "python3 not found on PATH: the third-party consumer check runs ${PKG}; install Python 3.8+ with venv, e.g. 'apt-get install python3 python3-venv'"

mkdir -p "$base" || die "cannot create cache directory $base (set OUTBOX_CACHE_DIR to a writable directory)"
# A virtualenv cannot be moved: take a lock instead of renaming.
exec 9>"$base/.lock"
flock 9
if [[ -f $dest/READY && -x $dest/venv/bin/python ]]; then
	printf '%s\n' "$dest/venv/bin/python"
	exit 0
fi
rm -rf "$dest"
mkdir -p "$dest"
printf 'install-kafka-python: installing %s==%s and lz4==%s into %s\n' "$PKG" "$PKG_VERSION" "$LZ4_VERSION" "$dest" >&2
python3 -m venv "$dest/venv" >"$base/.install.log" 2>&1 ||
	{ cat "$base/.install.log" >&2; die "python3 -m venv failed (output above); install the venv module, e.g. 'apt-get install python3-venv'"; }
"$dest/venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-input "$PKG==$PKG_VERSION" "lz4==$LZ4_VERSION" >"$base/.install.log" 2>&1 ||
	{ cat "$base/.install.log" >&2; die "pip install ${PKG}==${PKG_VERSION} lz4==${LZ4_VERSION} failed (output above); check that PyPI is reachable"; }
touch "$dest/READY"
printf '%s\n' "$dest/venv/bin/python"
