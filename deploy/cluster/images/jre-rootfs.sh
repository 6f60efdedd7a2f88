#!/usr/bin/env bash
# A Debian bookworm root filesystem with OpenJDK 17's headless JRE, for the JVM images (Kafka and the
# MongoDB-wire stand-in): debootstrap (minbase) from the Debian mirror this machine's apt already
# uses, once, as a tarball in the cache. Prints the tarball's path.
set -euo pipefail
. "$(dirname "$0")/../lib.sh"
out=$CACHE/rootfs/bookworm-jre17.tar
if [ ! -f "$out" ]; then
  mirror=$(cat /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null \
    | awk '/^URIs:/ || /^deb / {print $2}' | grep -v -- '-security' | head -1 || true)
  [ -n "$mirror" ] || { echo "no Debian mirror in this machine's apt sources" >&2; exit 1; }
  root=$CACHE/rootfs/bookworm-jre17
  rm -rf "$root"; mkdir -p "$root"
  log "debootstrap bookworm + openjdk-17-jre-headless into $root (first run only, a few minutes)"
  nice -n 10 debootstrap --variant=minbase --include=openjdk-17-jre-headless bookworm "$root" "$mirror" >&2
  # Nothing in the image needs apt's lists, docs or caches.
  rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/* "$root"/usr/share/doc "$root"/usr/share/man
  tar -C "$root" --numeric-owner -cf "$out.tmp" . && mv "$out.tmp" "$out"
  rm -rf "$root"
fi
echo "$out"
