# Shared by deploy/cluster/*.sh: where the cluster's build cache and state live (outside the clone).
K8S_VERSION=v1.34.4
CACHE=${PI_CLUSTER_CACHE:-/var/cache/pi-cluster}
STATE=${PI_CLUSTER_STATE:-/var/lib/pi-cluster}
RUN=/run/pi-cluster
BIN=$CACHE/bin/kubernetes-$K8S_VERSION
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# Pods live on their own bridge and subnet; the node (API server, kubelet) answers on the bridge's address.
BRIDGE=pi0
POD_CIDR=10.244.0.0/16
NODE_IP=10.244.0.1
SERVICE_CIDR=10.97.0.0/16
DNS_IP=10.97.0.10
CONTAINERD_SOCK=$RUN/containerd.sock
KUBECONFIG_ADMIN=$STATE/admin.conf
log() { printf '%s %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
# Debian packages the cluster needs; where apt's lists are too old for the mirror (a fresh machine that
# never ran apt-get update), once more after an update.
apt_install() {
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@" >/dev/null && return 0
  log "apt-get install $* failed: apt-get update, then again"
  apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@" >/dev/null
}
INGRESS_IP=10.97.0.80
CTR="ctr -a $CONTAINERD_SOCK -n k8s.io"
# A Docker engine, for `docker build`/`docker import` (the images are then saved into the cluster's
# containerd): the running one, else dockerd started in the background (its pid in $STATE/dockerd.pid).
ensure_docker() {
  docker info >/dev/null 2>&1 && return 0
  command -v dockerd >/dev/null || apt_install docker.io
  mkdir -p "$STATE/log"
  setsid bash -c 'echo $$ >"$0"; exec dockerd' "$STATE/dockerd.pid" >"$STATE/log/dockerd.log" 2>&1 </dev/null &
  for _ in $(seq 1 60); do docker info >/dev/null 2>&1 && return 0; sleep 1; done
  echo "dockerd did not start; see $STATE/log/dockerd.log" >&2; return 1
}
have_image() { $CTR images ls -q "name==$1" | grep -q .; }
# rootfs.tar name:tag [docker import --change ...]: a single-layer image, into the cluster's containerd.
import_rootfs() {
  local tar=$1 ref=$2; shift 2
  have_image "$ref" && return 0
  ensure_docker
  docker import "$@" "$tar" "$ref" >/dev/null
  docker save "$ref" | $CTR images import - >/dev/null
  log "image $ref loaded"
}
