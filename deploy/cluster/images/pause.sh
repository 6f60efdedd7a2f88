#!/usr/bin/env bash
# The pod sandbox image: a static pause (pause.c, like Kubernetes' own), built here.
set -euo pipefail
. "$(dirname "$0")/../lib.sh"
ref=pi.local/pause:3.10
have_image $ref && exit 0
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
gcc -Os -static -o "$d/pause" "$HERE/images/pause.c"
tar -C "$d" --owner=0 --group=0 -cf "$d/rootfs.tar" pause
import_rootfs "$d/rootfs.tar" $ref --change 'ENTRYPOINT ["/pause"]' --change 'USER 65535:65535'
