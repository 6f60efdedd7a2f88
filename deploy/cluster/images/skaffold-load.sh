#!/usr/bin/env bash
# The `before` hook of the Helm deployer in skaffold.yaml's `local-cluster` profile: loads into this
# cluster's containerd the images that Skaffold is about to deploy, exactly by the tag it deploys.
#
# For an image it does not push (local.push: false), Skaffold deploys neither the tag the build was
# given ($IMAGE of skaffold-build.sh) nor a digest, but `<name>:<image id>` (the image's own id without
# "sha256:"), a tag it applies in Docker after the build, or again when it finds the image in its
# cache without building (build.TagWithImageID, pkg/skaffold/build/local and build/cache). It loads
# such images itself only into kind and k3d clusters; for this one, this hook does it: every Docker
# image of the given names whose tag is its own id and which the node lacks is saved into
# containerd. Images already there are skipped, so a run whose images are unchanged loads nothing.
#
#   deploy/cluster/images/skaffold-load.sh [<image name>...]   (default: the profile's artifacts)
set -euo pipefail
. "$(dirname "$0")/../lib.sh"
ROOT=$(cd "$HERE/../.." && pwd)
if [ $# = 0 ]; then
  set -- $(cd "$ROOT" && node --input-type=module -e '
    import { readFileSync } from "node:fs";
    import { parse } from "yaml";
    const profile = parse(readFileSync("skaffold.yaml", "utf8")).profiles.find((p) => p.name === "local-cluster");
    console.log(profile.build.artifacts.map((a) => a.image).join(" "));')
fi
ensure_docker
# containerd names images as Docker's reference grammar normalizes them.
normalized() { case ${1%%/*} in *.*|*:*|localhost) echo "$1" ;; *) echo "docker.io/$1" ;; esac; }
loaded=0
for name in "$@"; do
  while read -r ref id; do
    [ "${ref##*:}" = "${id#sha256:}" ] || continue
    have_image "$(normalized "$ref")" && continue
    docker save "$ref" | $CTR images import - >/dev/null
    log "image $ref loaded into the cluster"
    loaded=$((loaded + 1))
  done < <(docker images --no-trunc --format '{{.Repository}}:{{.Tag}} {{.ID}}' "$name")
done
log "skaffold-load: $loaded image(s) loaded, the others were in the cluster already"
