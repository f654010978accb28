#!/usr/bin/env bash
# Installs the AWS Lambda Runtime Interface Emulator (aws-lambda-rie), which
# runs a function's real `bootstrap` binary behind Lambda's invoke API for the
# RIE tests, the demo and the benchmarks (see local/esm). Prints the path of
# the binary.
#
# The version is pinned: the emulator has no tagged releases on the Go module
# proxy, so this is the pseudo-version of a commit that is known to build with
# this repository's Go and to serve /2015-03-31/functions/function/invocations
# with the flags local/esm passes (--log-level,
# --runtime-interface-emulator-address, --runtime-api-address).
#
# Usage: scripts/install-rie.sh
#   OUTBOX_CACHE_DIR  cache root (default: <repo>/.cache); the binary goes to
#                     $OUTBOX_CACHE_DIR/bin/aws-lambda-rie
#
# Idempotent: when the pinned version is already installed it only prints the
# path. Exit status: 0 on success; 1 with a message on stderr.
set -euo pipefail

readonly MODULE=github.com/aws/aws-lambda-runtime-interface-emulator
readonly VERSION=v0.0.0-20261030222936-bef5c4ba774d

die() {
	printf 'install-rie: %s\n' "$*" >&2
	exit 1
}

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cache_root=${OUTBOX_CACHE_DIR:-$repo_root/.cache}
bin_dir=$cache_root/bin
bin=$bin_dir/aws-lambda-rie

command -v go >/dev/null 2>&1 || die "go not found on PATH: the emulator is built with 'go install'"

# `go version -m` reads the module version the binary was built from, so a
# binary of another version is replaced rather than trusted by its name.
if [[ -x $bin ]] && go version -m "$bin" 2>/dev/null | grep -q "mod[[:space:]]*$MODULE[[:space:]]*$VERSION"; then
	printf '%s\n' "$bin"
	exit 0
fi

mkdir -p "$bin_dir" || die "cannot create $bin_dir (set OUTBOX_CACHE_DIR to a writable directory)"
printf 'install-rie: installing %s@%s into %s\n' "$MODULE" "$VERSION" "$bin_dir" >&2
# go install writes the binary atomically (it links to a temporary file and
# renames it), so concurrent runs are safe. CGO is not needed.
if ! CGO_ENABLED=0 GOBIN=$bin_dir GOFLAGS=-buildvcs=false \
	go install "$MODULE/cmd/aws-lambda-rie@$VERSION"; then
	die "go install $MODULE/cmd/aws-lambda-rie@$VERSION failed (output above); check that the Go module proxy is reachable (GOPROXY=$(go env GOPROXY))"
fi
[[ -x $bin ]] || die "go install succeeded but $bin is missing"
printf '%s\n' "$bin"
