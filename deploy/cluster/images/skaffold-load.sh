#!/usr/bin/env bash
# The `before` hook of the Helm deployer in skaffold.yaml's `local-cluster` profile: loads into this
# cluster's containerd the images that Skaffold is about to deploy, exactly by the tag it deploys.
#
# For an image it does not push (local.push: false), Skaffold deploys neither the tag the build was
# given ($IMAGE of skaffold-build.sh) nor a digest, but `<name>:<image id>` (the image's own id without
# "sha256:"), a tag it applies in Docker after the build, or again when it finds the image in its
# cache without building (build.TagWithImageID, pkg/skaffold/build/local and build/cache). It loads
# such images itself only into kind and k3d clusters; for this one, this hook does it.
#
# Which image: the one that carries the tag Skaffold generates for the artifact's current inputs
# (`skaffold build --dry-run`, the same computation: its inputDigest), whether it was just built or
# found in the cache. Where that tag is not in Docker (or the dry run fails), every image of the
# artifact's name whose tag is its own id is loaded instead. Images the node has are skipped.
#
#   deploy/cluster/images/skaffold-load.sh     (run by Skaffold; skaffold and helm on PATH, as
#                                               deploy/cluster/skaffold.sh sets them)
set -euo pipefail
. "$(dirname "$0")/../lib.sh"
ROOT=$(cd "$HERE/../.." && pwd)
SKAFFOLD=$(command -v skaffold || echo "$CACHE/bin/skaffold-v2.16.1/skaffold")
ensure_docker
# containerd names images as Docker's reference grammar normalizes them.
normalized() { case ${1%%/*} in *.*|*:*|localhost) echo "$1" ;; *) echo "docker.io/$1" ;; esac; }
loaded=0
load() { # ref
  have_image "$(normalized "$1")" && return 0
  docker save "$1" | $CTR images import - >/dev/null
  log "image $1 loaded into the cluster"
  loaded=$((loaded + 1))
}
# "<name> <generated tag>" per artifact of the profile.
builds=$(cd "$ROOT" && "$SKAFFOLD" build -p local-cluster --dry-run -q 2>/dev/null | node -e '
  let s = ""; process.stdin.on("data", (d) => (s += d)).on("end", () => {
    for (const b of JSON.parse(s).builds) console.log(`${b.imageName} ${b.tag}`);
  });') || { log "skaffold build --dry-run failed: loading every image tagged with its id"; builds=""; }
[ -n "$builds" ] || builds=$(cd "$ROOT" && node --input-type=module -e '
  import { readFileSync } from "node:fs";
  import { parse } from "yaml";
  const profile = parse(readFileSync("skaffold.yaml", "utf8")).profiles.find((p) => p.name === "local-cluster");
  for (const a of profile.build.artifacts) console.log(`${a.image} -`);')
while read -r name tag; do
  if [ "$tag" != - ] && id=$(docker image inspect -f '{{.Id}}' "$tag" 2>/dev/null); then
    load "$name:${id#sha256:}"
    continue
  fi
  while read -r ref id; do
    if [ "${ref##*:}" = "${id#sha256:}" ]; then load "$ref"; fi
  done < <(docker images --no-trunc --format '{{.Repository}}:{{.Tag}} {{.ID}}' "$name")
done <<<"$builds"
log "skaffold-load: $loaded image(s) loaded, the others were in the cluster already"
