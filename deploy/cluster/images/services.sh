#!/usr/bin/env bash
# The five service images from the project's Dockerfile (deploy/Dockerfile, one build per SERVICE), on
# the Node 20 base that deploy/checks/image-check.mjs assembles from this machine's node (no image is
# pulled), loaded into the cluster's containerd. The tag is the image's own id, so an unchanged tree
# loads nothing new. Prints SERVICES_TAG=<tag>.
set -euo pipefail
. "$(dirname "$0")/../lib.sh"
ROOT=$(cd "$HERE/../.." && pwd)
ensure_docker
base=$(cd "$ROOT" && node --input-type=module -e \
  'import { ensureBaseImage } from "./deploy/checks/image-check.mjs"; console.log(ensureBaseImage());')
tag=""
for svc in gateway auth connection file-intake webhook; do
  # --network host: npm ci inside the build reaches the npm registry the way the machine does.
  nice -n 10 docker build -q --network host -f "$ROOT/deploy/Dockerfile" --build-arg BASE_IMAGE="$base" \
    --build-arg SERVICE=$svc -t partner-integration/$svc:build "$ROOT" >/dev/null
  # One tag for the five: the gateway's image id (every image shares its build stage).
  [ -n "$tag" ] || tag=$(docker image inspect -f '{{.Id}}' partner-integration/gateway:build | cut -d: -f2 | cut -c1-12)
done
for svc in gateway auth connection file-intake webhook; do
  ref=docker.io/partner-integration/$svc:$tag
  have_image "$ref" && continue
  docker tag partner-integration/$svc:build "partner-integration/$svc:$tag"
  docker save "partner-integration/$svc:$tag" | $CTR images import - >/dev/null
  log "image $ref loaded"
done
echo "SERVICES_TAG=$tag"
