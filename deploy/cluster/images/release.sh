#!/usr/bin/env bash
# The images of an earlier release (test-cluster.sh's upgrade step installs them, then upgrades to this
# commit): the service images from that commit's own tree (`git archive`, the Docker build context on
# stdin) and its own deploy/Dockerfile, on the same Node base as this commit's (services.sh), tagged
# <version>-<commit, 12 digits> so they never mix with this commit's. Cached by commit: an image the
# node already has under that tag is not loaded again, one Docker has is not built again.
# Kafka and the MongoDB-wire stand-in: where their sources did not change since that commit, this
# commit's (jvm.sh, the same bytes); otherwise that commit's own jvm.sh on its extracted tree.
# Usage: release.sh COMMIT VERSION. Prints RELEASE_SERVICES_TAG=, RELEASE_KAFKA_IMAGE=, RELEASE_MONGO_WIRE_IMAGE=.
set -euo pipefail
. "$(dirname "$0")/../lib.sh"
ROOT=$(cd "$HERE/../.." && pwd)
commit=$1 version=$2
tag=$version-${commit:0:12}
base=""
for svc in gateway auth connection file-intake webhook; do
  ref=docker.io/partner-integration/$svc:$tag
  have_image "$ref" && continue
  ensure_docker
  if ! docker image inspect "partner-integration/$svc:$tag" >/dev/null 2>&1; then
    [ -n "$base" ] || base=$(cd "$ROOT" && node --input-type=module -e \
      'import { ensureBaseImage } from "./deploy/checks/image-check.mjs"; console.log(ensureBaseImage());')
    git -C "$ROOT" archive --format=tar "$commit" | nice -n 10 docker build -q --network host -f deploy/Dockerfile \
      --build-arg BASE_IMAGE="$base" --build-arg SERVICE=$svc -t "partner-integration/$svc:$tag" - >/dev/null
    log "image partner-integration/$svc:$tag built from $commit"
  fi
  docker save "partner-integration/$svc:$tag" | $CTR images import - >/dev/null
  log "image $ref loaded"
done
echo "RELEASE_SERVICES_TAG=$tag"
if git -C "$ROOT" diff --quiet "$commit" HEAD -- deploy/cluster/images deploy/infra/mongo-wire; then
  out=$("$HERE/images/jvm.sh")
else
  tree=${PI_CLUSTER_CACHE:-/var/cache/pi-cluster}/releases/$commit
  [ -d "$tree" ] || { mkdir -p "$tree.tmp" && git -C "$ROOT" archive "$commit" | tar -x -C "$tree.tmp" && mv "$tree.tmp" "$tree"; }
  out=$("$tree/deploy/cluster/images/jvm.sh")
fi
echo "$out" | sed -n 's/^\(KAFKA_IMAGE\|MONGO_WIRE_IMAGE\)=/RELEASE_\1=/p'
