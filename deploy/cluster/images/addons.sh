#!/usr/bin/env bash
# Images of the cluster's add-ons, each a static binary built by build-go.sh in an otherwise empty
# filesystem (plus /etc/passwd), loaded into the cluster's containerd: CoreDNS and Traefik (the ingress
# controller).
set -euo pipefail
. "$(dirname "$0")/../lib.sh"
one() { # ref binary
  local ref=$1 bin=$2
  have_image "$ref" && return 0
  local d; d=$(mktemp -d)
  mkdir -p "$d/root/etc" "$d/root/tmp"; chmod 1777 "$d/root/tmp"
  cp "$bin" "$d/root/"
  printf 'root:x:0:0::/:/nonexistent\nnonroot:x:65532:65532::/:/nonexistent\n' > "$d/root/etc/passwd"
  printf 'root:x:0:\nnonroot:x:65532:\n' > "$d/root/etc/group"
  tar -C "$d/root" --owner=0 --group=0 -cf "$d/rootfs.tar" .
  import_rootfs "$d/rootfs.tar" "$ref" --change "ENTRYPOINT [\"/$(basename "$bin")\"]" --change 'USER 65532:65532'
  rm -rf "$d"
}
one pi.local/coredns:v1.12.1 "$CACHE/bin/coredns-v1.12.1/coredns"
one pi.local/traefik:v3.5.3 "$CACHE/bin/traefik-v3.5.3/traefik"
