#!/usr/bin/env bash
# Stops the local cluster of up.sh and removes what it made (daemons, pod containers and their network
# namespaces and mounts, the bridge, the iptables guard and kube-proxy's rules, $STATE and $RUN), by
# the pids it recorded. The build cache ($CACHE) stays, so the next up.sh takes seconds.
#
#   deploy/cluster/down.sh            everything but the cache
#   deploy/cluster/down.sh --keep     stop the daemons only (state, images and volumes stay)
set -uo pipefail
. "$(dirname "$0")/lib.sh"
KEEP=0; [ "${1:-}" = --keep ] && KEEP=1
stop() { # name
  local f=$STATE/$1.pid pid
  [ -f "$f" ] || return 0
  pid=$(cat "$f")
  if kill "$pid" 2>/dev/null; then
    for _ in $(seq 1 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
    kill -9 "$pid" 2>/dev/null
    log "stopped $1"
  fi
  rm -f "$f"
}
stop kube-proxy
stop kubelet
if [ -f "$STATE/containerd.pid" ] && kill -0 "$(cat "$STATE/containerd.pid")" 2>/dev/null; then
  # Pod containers first: their shims exit with them.
  for t in $($CTR tasks ls -q 2>/dev/null); do $CTR tasks kill -s SIGKILL "$t" 2>/dev/null; done
  sleep 2
  for t in $($CTR tasks ls -q 2>/dev/null); do $CTR tasks delete -f "$t" >/dev/null 2>&1; done
  for c in $($CTR containers ls -q 2>/dev/null); do $CTR containers delete "$c" >/dev/null 2>&1; done
fi
stop containerd
stop kube-scheduler
stop kube-controller-manager
stop kube-apiserver
stop etcd
stop dockerd
# Shims left behind by a containerd that died first: only those of our socket's namespace.
for p in $(pgrep -f "containerd-shim-runc-v2 .*-address $CONTAINERD_SOCK" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
for ns in $(ip netns list 2>/dev/null | awk '/^cni-/{print $1}'); do
  ip netns pids "$ns" 2>/dev/null | grep -q . || ip netns delete "$ns"
done
grep -oE " ($STATE/kubelet|$STATE/containerd|$RUN)[^ ]*" /proc/mounts | sort -r | xargs -r -n1 umount -l 2>/dev/null
[ "$KEEP" = 1 ] && exit 0
iptables -D FORWARD -s $POD_CIDR ! -o $BRIDGE -j DROP 2>/dev/null
iptables -D FORWARD -i $BRIDGE -o $BRIDGE -j ACCEPT 2>/dev/null
# kube-proxy's chains (KUBE-*), removed as `kube-proxy --cleanup` would.
[ -x "$BIN/kube-proxy" ] && "$BIN/kube-proxy" --cleanup >/dev/null 2>&1
ip link del $BRIDGE 2>/dev/null
rm -rf "$STATE" "$RUN"
log "cluster removed (build cache kept in $CACHE)"
