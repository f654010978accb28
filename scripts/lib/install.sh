# shellcheck shell=bash
# Sourced by the installers of Java engines (install-dynamodb-local.sh,
# install-kafka.sh): the Java check, the cache directory, a private temporary
# directory, and the rename that makes an install appear whole. Before
# sourcing, set INSTALLER (the prefix of messages), PRODUCT (what is being
# installed, for the Java message), MIN_JAVA, and CACHE_SUBDIR (the
# directory under the cache root).

die() {
	printf '%s: %s\n' "$INSTALLER" "$*" >&2
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
		die "java not found on PATH: ${PRODUCT} needs Java ${MIN_JAVA} or newer; ${hint}"
	local major
	major=$(java_major) ||
		die "could not read the version of $(command -v java) ('java -version' printed no version); ${hint}"
	((major >= MIN_JAVA)) ||
		die "java on PATH ($(command -v java)) is version ${major}, older than ${MIN_JAVA}: ${PRODUCT} needs Java ${MIN_JAVA} or newer; ${hint}"
}

# base is the engine's cache directory: $OUTBOX_CACHE_DIR/$CACHE_SUBDIR
# (default cache root: <repo>/.cache).
repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cache_root=${OUTBOX_CACHE_DIR:-$repo_root/.cache}
base=$cache_root/$CACHE_SUBDIR

# make_tmp creates $tmp, a private temporary directory in $base removed on
# exit: concurrent runs each install into their own.
make_tmp() {
	mkdir -p "$base" || die "cannot create cache directory $base (set OUTBOX_CACHE_DIR to a writable directory)"
	tmp=$(mktemp -d "$base/.install.XXXXXX") || die "cannot create a temporary directory in $base"
	trap 'rm -rf "$tmp"' EXIT
}

# move_into_place SRC DEST MARKER WHAT renames the finished install SRC to
# DEST and checks that DEST/MARKER exists. rename(2) makes the install
# appear whole. Another run may have finished first; its copy is as good as
# ours. GNU mv -T refuses to move into an existing directory; elsewhere the
# check narrows the race to a harmless leftover subdirectory.
move_into_place() {
	local src=$1 dest=$2 marker=$3 what=$4
	local no_target=()
	if mv --version 2>/dev/null | grep -q GNU; then
		no_target=(-T)
	fi
	if [[ ! -e $dest ]]; then
		mv "${no_target[@]}" "$src" "$dest" 2>/dev/null || true
	fi
	[[ -f $dest/$marker ]] || die "cannot move the $what into $dest"
}
