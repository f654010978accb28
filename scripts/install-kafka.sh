#!/usr/bin/env bash
# Installs an Apache Kafka broker (the real one, beside kfake, for the suites
# that run against real brokers: internal/testenv.RealKafka) into a cache
# directory and prints the directory that holds its jars (libs/).
#
# Apache Kafka 4.4.0 (KRaft only, Scala 2.13) comes from Maven Central as the
# artifact org.apache.kafka:kafka_2.13 and its runtime dependencies, with the
# log4j binding the release tarball ships; nothing else is downloaded. Maven
# resolves them into a private local repository with --strict-checksums: every
# file is checked against the checksum the repository publishes beside it
# (.sha1), and a missing or wrong checksum fails the install. Running the
# broker needs Java 17 or newer.
#
# Usage: scripts/install-kafka.sh
#   OUTBOX_CACHE_DIR  cache root (default: <repo>/.cache); the broker goes to
#                     $OUTBOX_CACHE_DIR/kafka/<version>/libs/
#
# Idempotent: when the broker is already installed it only checks Java and
# prints the directory. Concurrent runs are safe: each installs into its own
# temporary directory and the first to rename it into place wins.
# Exit status: 0 on success; 1 with a message on stderr naming what to install.
set -euo pipefail

readonly KAFKA_VERSION=4.4.0
readonly SCALA=2.13
readonly LOG4J_VERSION=2.25.5
readonly MIN_JAVA=17

die() {
	printf 'install-kafka: %s\n' "$*" >&2
	exit 1
}

# java_major prints the major version of the java on PATH ("17.0.15" -> 17).
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
		die "java not found on PATH: Apache Kafka ${KAFKA_VERSION} needs Java ${MIN_JAVA} or newer; ${hint}"
	local major
	major=$(java_major) ||
		die "could not read the version of $(command -v java) ('java -version' printed no version); ${hint}"
	((major >= MIN_JAVA)) ||
		die "java on PATH ($(command -v java)) is version ${major}, older than ${MIN_JAVA}: Apache Kafka ${KAFKA_VERSION} needs Java ${MIN_JAVA} or newer; ${hint}"
}

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cache_root=${OUTBOX_CACHE_DIR:-$repo_root/.cache}
base=$cache_root/kafka
dest=$base/$KAFKA_VERSION

check_java

# Fast path: the final directory only ever appears complete (it is renamed
# into place), so its marker is enough to know the install finished.
if [[ -f $dest/VERSION && -d $dest/libs ]]; then
	printf '%s\n' "$dest"
	exit 0
fi

command -v mvn >/dev/null 2>&1 ||
	die "mvn not found on PATH: it downloads Apache Kafka ${KAFKA_VERSION} from Maven Central; install Apache Maven, e.g. 'apt-get install maven' (Debian/Ubuntu) or 'brew install maven' (macOS)"

mkdir -p "$base" || die "cannot create cache directory $base (set OUTBOX_CACHE_DIR to a writable directory)"
tmp=$(mktemp -d "$base/.install.XXXXXX") || die "cannot create a temporary directory in $base"
trap 'rm -rf "$tmp"' EXIT

printf 'install-kafka: installing Apache Kafka %s (org.apache.kafka:kafka_%s from Maven Central) into %s\n' \
	"$KAFKA_VERSION" "$SCALA" "$dest" >&2

cat >"$tmp/pom.xml" <<EOF
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>outbox.test</groupId>
  <artifactId>kafka-broker</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka_${SCALA}</artifactId>
      <version>${KAFKA_VERSION}</version>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-slf4j-impl</artifactId>
      <version>${LOG4J_VERSION}</version>
    </dependency>
  </dependencies>
</project>
EOF

# -C (--strict-checksums): fail on a missing or mismatching checksum instead
# of warning. A private local repository: no sharing (or locking) with
# ~/.m2, and nothing left behind but the jars.
if ! mvn -B -q -C -f "$tmp/pom.xml" -Dmaven.repo.local="$tmp/m2" \
	dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$tmp/engine/libs" \
	>"$tmp/mvn.log" 2>&1; then
	cat "$tmp/mvn.log" >&2
	die "mvn could not resolve Apache Kafka ${KAFKA_VERSION} (output above); check that Maven Central is reachable"
fi
[[ -f $tmp/engine/libs/kafka_${SCALA}-${KAFKA_VERSION}.jar ]] ||
	die "Maven resolved no kafka_${SCALA}-${KAFKA_VERSION}.jar (artifact layout changed?)"
# The jars' SHA-256 sums, for the record (the install checked SHA-1 against
# the repository's).
(cd "$tmp/engine/libs" && sha256sum -- *.jar >../SHA256SUMS)
printf '%s\n' "$KAFKA_VERSION" >"$tmp/engine/VERSION"

# rename(2) makes the install appear whole. Another run may have finished
# first; its copy is as good as ours.
no_target=()
if mv --version 2>/dev/null | grep -q GNU; then
	no_target=(-T)
fi
if [[ ! -e $dest ]]; then
	mv "${no_target[@]}" "$tmp/engine" "$dest" 2>/dev/null || true
fi
[[ -f $dest/VERSION ]] || die "cannot move the broker into $dest"
printf '%s\n' "$dest"
