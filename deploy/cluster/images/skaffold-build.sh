#!/usr/bin/env bash
# Skaffold's custom builder in the `local-cluster` profile (skaffold.yaml): builds the image Skaffold
# names in $IMAGE, in the local Docker engine, the way test:cluster does (nothing is pushed or
# pulled: $PUSH_IMAGE is false). `service <name>`: deploy/Dockerfile on the assembled Node base;
# `jvm kafka` or `jvm mongo-wire`: images/jvm.sh's image, tagged $IMAGE. Skaffold deploys the image
# by another tag, its image id, which the Helm deployer's hook (skaffold-load.sh) loads into the node.
set -euo pipefail
. "$(dirname "$0")/../lib.sh"
ROOT=$(cd "$HERE/../.." && pwd)
: "${IMAGE:?Skaffold sets IMAGE}"
[ "${PUSH_IMAGE:-false}" = true ] && { echo "nothing is pushed from here: use the profile with local.push: false" >&2; exit 1; }
ensure_docker
case $1 in
  service)
    base=$(cd "$ROOT" && node --input-type=module -e \
      'import { ensureBaseImage } from "./deploy/checks/image-check.mjs"; console.log(ensureBaseImage());')
    nice -n 10 docker build -q --network host -f "$ROOT/deploy/Dockerfile" --build-arg BASE_IMAGE="$base" \
      --build-arg SERVICE="$2" -t "$IMAGE" "$ROOT" >/dev/null ;;
  jvm)
    var=$(echo "$2" | tr a-z- A-Z_)_IMAGE
    ref=$("$HERE/images/jvm.sh" | sed -n "s/^$var=//p")
    [ -n "$ref" ] || { echo "images/jvm.sh built no $var" >&2; exit 1; }
    docker tag "$ref" "$IMAGE" ;;
  *) echo "usage: IMAGE=<ref> $0 service <name> | jvm kafka|mongo-wire" >&2; exit 2 ;;
esac
log "image $IMAGE built"
