#!/usr/bin/env bash
# Installs an Apache Kafka broker (the real one, beside kfake, for the suites
# that run against real brokers and for `outbox local --real`:
# local/kafkalocal.Start) into a cache directory and prints the directory that holds its jars (libs/).
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

INSTALLER=install-kafka
PRODUCT="Apache Kafka ${KAFKA_VERSION}"
CACHE_SUBDIR=kafka
# shellcheck source=lib/install.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/install.sh"
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

make_tmp

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

move_into_place "$tmp/engine" "$dest" VERSION broker
printf '%s\n' "$dest"
