#!/usr/bin/env bash
# The JVM images, loaded into the cluster's containerd: pi.local/jre:17 (Debian bookworm minbase and
# OpenJDK 17, jre-rootfs.sh), Kafka 3.9.1 (kafka/) and the MongoDB-wire stand-in (mongo-java-server
# with its H2 backend, deploy/infra/mongo-wire). Each is rebuilt only when its inputs change (the tag
# is a hash of them). Prints KAFKA_IMAGE=<ref> and MONGO_WIRE_IMAGE=<ref>, the only output on stdout:
# what the build tools print goes to stderr (Maven's -q still writes an ANSI reset, without a newline,
# which once glued itself to the next line and hid MONGO_WIRE_IMAGE from test-cluster.sh).
set -euo pipefail
. "$(dirname "$0")/../lib.sh"
ROOT=$(cd "$HERE/../.." && pwd)
hash_of() { (cd "$ROOT" && find "$@" -type f -print0 | sort -z | xargs -0 sha256sum) | sha256sum | cut -c1-12; }

ensure_docker
if ! docker image inspect pi.local/jre:17 >/dev/null 2>&1; then
  docker import --change 'ENV LANG=C.UTF-8' "$("$HERE/images/jre-rootfs.sh")" pi.local/jre:17 >/dev/null
fi

load() { # ref context-dir
  have_image "$1" && return 0
  docker image inspect "$1" >/dev/null 2>&1 || docker build -q -t "$1" "$2" >/dev/null
  docker save "$1" | $CTR images import - >/dev/null
  log "image $1 loaded"
}

# Kafka: jars from Maven into the cache, then the image.
ref=pi.local/kafka:3.9.1-$(hash_of deploy/cluster/images/kafka)
if ! have_image "$ref"; then
  libs=$CACHE/kafka-3.9.1/libs
  [ -f "$libs/kafka_2.13-3.9.1.jar" ] && [ -f "$libs/kafka-tools-3.9.1.jar" ] || \
    mvn -q -f "$HERE/images/kafka/pom.xml" dependency:copy-dependencies -DoutputDirectory="$libs" -DincludeScope=runtime >&2
  ctx=$(mktemp -d); cp -r "$HERE/images/kafka/." "$ctx/"; cp -r "$libs" "$ctx/libs"
  load "$ref" "$ctx"; rm -rf "$ctx"
fi
echo "KAFKA_IMAGE=$ref"

# The MongoDB-wire stand-in: deploy/infra/mongo-wire's Main compiled against its Maven dependencies.
src=deploy/infra/mongo-wire
if [ -f "$ROOT/$src/pom.xml" ]; then
  ref=pi.local/mongo-wire:$(hash_of $src deploy/cluster/images/mongo-wire)
  if ! have_image "$ref"; then
    ctx=$(mktemp -d); mkdir -p "$ctx/classes"
    mvn -q -f "$ROOT/$src/pom.xml" dependency:copy-dependencies -DoutputDirectory="$ctx/libs" -DincludeScope=runtime >&2
    javac -nowarn -d "$ctx/classes" -cp "$ctx/libs/*" $(find "$ROOT/$src" -name '*.java') >&2
    cp "$HERE/images/mongo-wire/Dockerfile" "$ctx/"
    load "$ref" "$ctx"; rm -rf "$ctx"
  fi
  echo "MONGO_WIRE_IMAGE=$ref"
fi
