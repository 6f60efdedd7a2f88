#!/usr/bin/env bash
# Brings up (or reuses) a one-node Kubernetes on this machine, without kind and without pulling any
# image: the components are built once from their Go modules (build-go.sh, cached under $CACHE), with
# Debian's etcd, containerd, runc and CNI plugins. Needs root (it runs daemons, a bridge, iptables).
#
#   deploy/cluster/up.sh        # then: export KUBECONFIG=/var/lib/pi-cluster/admin.conf
#   deploy/cluster/down.sh      # stops every daemon and removes what up.sh made, except the cache
#
# Pods live on the bridge pi0 (10.244.0.0/16); the node answers on 10.244.0.1; Services use
# 10.97.0.0/16. An iptables guard drops anything from pods that would leave through another
# interface, so nothing from a pod leaves the machine. State: $STATE; logs: $STATE/log.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
[ "$(id -u)" = 0 ] || { echo "up.sh needs root" >&2; exit 1; }
t0=$(date +%s)

need=""
for c in etcd containerd runc debootstrap conntrack iptables; do command -v $c >/dev/null || need=1; done
[ -x /usr/lib/cni/bridge ] || need=1
if [ -n "$need" ]; then
  log "installing etcd-server containerd runc containernetworking-plugins debootstrap conntrack iptables"
  apt_install etcd-server containerd runc containernetworking-plugins debootstrap conntrack iptables
fi
# Debian starts its own etcd and containerd services on install where systemd runs; ours are separate
# (own ports, own sockets), so those are left alone.

"$HERE/build-go.sh" kubernetes coredns traefik
export PATH=$BIN:$PATH
mkdir -p "$STATE/log" "$STATE/cni/net.d" "$STATE/etcd" "$STATE/kubelet" "$STATE/pv" "$RUN"
LOGDIR=$STATE/log
NODE=$(hostname | tr 'A-Z' 'a-z')

# 0. The bridge, with the node's address, and the guard.
if ! ip link show $BRIDGE >/dev/null 2>&1; then
  ip link add $BRIDGE type bridge
  ip addr add $NODE_IP/16 dev $BRIDGE
fi
ip link set $BRIDGE up
modprobe br_netfilter 2>/dev/null || true
sysctl -qw net.ipv4.ip_forward=1 net.bridge.bridge-nf-call-iptables=1
# Pod to pod (and pod to Service to pod) stays on the bridge: accepted even where Docker's FORWARD
# policy is DROP. Anything else from a pod that is not for the node itself is dropped.
iptables -C FORWARD -i $BRIDGE -o $BRIDGE -j ACCEPT 2>/dev/null || iptables -I FORWARD 1 -i $BRIDGE -o $BRIDGE -j ACCEPT
iptables -C FORWARD -s $POD_CIDR ! -o $BRIDGE -j DROP 2>/dev/null || iptables -I FORWARD 1 -s $POD_CIDR ! -o $BRIDGE -j DROP
sed "s#@BRIDGE@#$BRIDGE#; s#@POD_CIDR@#$POD_CIDR#; s#@NODE_IP@#$NODE_IP#; s#@STATE@#$STATE#" \
  "$HERE/node/cni.conflist" > "$STATE/cni/net.d/10-pi.conflist"

# 1. Certificates and kubeconfigs: kubeadm's phases only.
if [ ! -f "$STATE/pki/ca.crt" ]; then
  cat > "$STATE/kubeadm.yaml" <<EOC
apiVersion: kubeadm.k8s.io/v1beta4
kind: InitConfiguration
localAPIEndpoint: { advertiseAddress: $NODE_IP, bindPort: 6443 }
nodeRegistration: { name: $NODE }
---
apiVersion: kubeadm.k8s.io/v1beta4
kind: ClusterConfiguration
kubernetesVersion: $K8S_VERSION
certificatesDir: $STATE/pki
controlPlaneEndpoint: $NODE_IP:6443
networking: { serviceSubnet: $SERVICE_CIDR, dnsDomain: cluster.local }
apiServer: { certSANs: [$NODE_IP, 10.97.0.1] }
EOC
  kubeadm init phase certs all --config "$STATE/kubeadm.yaml" >"$LOGDIR/kubeadm.log"
  for k in admin super-admin controller-manager scheduler kubelet; do
    kubeadm init phase kubeconfig $k --config "$STATE/kubeadm.yaml" --kubeconfig-dir "$STATE" >>"$LOGDIR/kubeadm.log"
  done
fi
PKI=$STATE/pki

start() { # name command...: starts a daemon once (pid in $STATE/<name>.pid), in its own session
  local n=$1; shift
  if [ -s "$STATE/$n.pid" ] && kill -0 "$(cat "$STATE/$n.pid")" 2>/dev/null; then return; fi
  rm -f "$STATE/$n.pid"
  # The shell records its own pid, then becomes the daemon (exec): the pid file is the daemon's even
  # where setsid has to fork.
  setsid bash -c 'echo $$ >"$0"; exec "$@"' "$STATE/$n.pid" "$@" >"$LOGDIR/$n.log" 2>&1 </dev/null &
  for _ in 1 2 3 4 5; do [ -s "$STATE/$n.pid" ] && break; sleep 0.2; done
}
wait_for() { # what seconds command...
  local what=$1 s=$2; shift 2
  for _ in $(seq 1 "$s"); do "$@" >/dev/null 2>&1 && return 0; sleep 1; done
  echo "$what did not come up within ${s}s; see $LOGDIR" >&2; return 1
}
K="$BIN/kubectl --kubeconfig $KUBECONFIG_ADMIN"

# 2. etcd (Debian's), on ports of its own.
start etcd etcd --name pi --data-dir "$STATE/etcd" \
  --listen-client-urls http://127.0.0.1:12379 --advertise-client-urls http://127.0.0.1:12379 \
  --listen-peer-urls http://127.0.0.1:12380 --initial-advertise-peer-urls http://127.0.0.1:12380 \
  --initial-cluster pi=http://127.0.0.1:12380 --listen-metrics-urls http://127.0.0.1:12381

# 3. The control plane.
start kube-apiserver kube-apiserver --etcd-servers=http://127.0.0.1:12379 \
  --advertise-address=$NODE_IP --bind-address=$NODE_IP --secure-port=6443 \
  --allow-privileged=false --authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction \
  --client-ca-file=$PKI/ca.crt --tls-cert-file=$PKI/apiserver.crt --tls-private-key-file=$PKI/apiserver.key \
  --kubelet-client-certificate=$PKI/apiserver-kubelet-client.crt --kubelet-client-key=$PKI/apiserver-kubelet-client.key \
  --kubelet-preferred-address-types=InternalIP \
  --service-account-issuer=https://kubernetes.default.svc.cluster.local \
  --service-account-key-file=$PKI/sa.pub --service-account-signing-key-file=$PKI/sa.key \
  --service-cluster-ip-range=$SERVICE_CIDR \
  --requestheader-client-ca-file=$PKI/front-proxy-ca.crt --requestheader-allowed-names=front-proxy-client \
  --requestheader-extra-headers-prefix=X-Remote-Extra- --requestheader-group-headers=X-Remote-Group \
  --requestheader-username-headers=X-Remote-User \
  --proxy-client-cert-file=$PKI/front-proxy-client.crt --proxy-client-key-file=$PKI/front-proxy-client.key
wait_for kube-apiserver 90 $K get --raw /readyz
# What `kubeadm init` would do: admin.conf's group kubeadm:cluster-admins is cluster-admin.
$K get clusterrolebinding kubeadm:cluster-admins >/dev/null 2>&1 || \
  kubectl --kubeconfig "$STATE/super-admin.conf" create clusterrolebinding kubeadm:cluster-admins \
    --clusterrole=cluster-admin --group=kubeadm:cluster-admins >/dev/null

start kube-controller-manager kube-controller-manager --kubeconfig=$STATE/controller-manager.conf \
  --authentication-kubeconfig=$STATE/controller-manager.conf --authorization-kubeconfig=$STATE/controller-manager.conf \
  --cluster-signing-cert-file=$PKI/ca.crt --cluster-signing-key-file=$PKI/ca.key --root-ca-file=$PKI/ca.crt \
  --service-account-private-key-file=$PKI/sa.key --use-service-account-credentials=true \
  --service-cluster-ip-range=$SERVICE_CIDR --leader-elect=false --bind-address=127.0.0.1 \
  --controllers='*,bootstrapsigner,tokencleaner'
start kube-scheduler kube-scheduler --kubeconfig=$STATE/scheduler.conf \
  --authentication-kubeconfig=$STATE/scheduler.conf --authorization-kubeconfig=$STATE/scheduler.conf \
  --leader-elect=false --bind-address=127.0.0.1

# 4. containerd (own root, state and socket) and the node.
sed "s#@STATE@#$STATE#g; s#@RUN@#$RUN#g" "$HERE/node/containerd.toml" > "$STATE/containerd.toml"
start containerd containerd --config "$STATE/containerd.toml"
wait_for containerd 30 ctr -a $CONTAINERD_SOCK version
"$HERE/images/pause.sh"
cat > "$STATE/kubelet-config.yaml" <<EOC
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication:
  anonymous: { enabled: false }
  webhook: { enabled: true }
  x509: { clientCAFile: $PKI/ca.crt }
authorization: { mode: Webhook }
cgroupDriver: cgroupfs
# 1.34 is the last kubelet that runs on cgroup v1 (this machine's) without refusing.
failCgroupV1: false
containerRuntimeEndpoint: unix://$CONTAINERD_SOCK
clusterDNS: [$DNS_IP]
clusterDomain: cluster.local
failSwapOn: false
address: $NODE_IP
healthzBindAddress: 127.0.0.1
resolvConf: $STATE/resolv.conf
maxPods: 150
evictionHard: { memory.available: 100Mi, nodefs.available: 2%, imagefs.available: 2% }
imageGCHighThresholdPercent: 99
imageGCLowThresholdPercent: 98
EOC
echo "nameserver $DNS_IP" > "$STATE/resolv.conf"
start kubelet kubelet --config=$STATE/kubelet-config.yaml --kubeconfig=$STATE/kubelet.conf \
  --root-dir=$STATE/kubelet --node-ip=$NODE_IP --hostname-override=$NODE
start kube-proxy kube-proxy --kubeconfig=$KUBECONFIG_ADMIN --cluster-cidr=$POD_CIDR \
  --hostname-override=$NODE --proxy-mode=iptables --metrics-bind-address=127.0.0.1:10249 \
  --healthz-bind-address=127.0.0.1:10256
wait_for "node $NODE" 120 $K wait --for=condition=Ready node/$NODE --timeout=1s

# 5. Add-ons: storage, DNS, the ingress controller (images built here) with Gateway API.
"$HERE/images/addons.sh"
"$HERE/storage.sh"
# CRDs, vendored (deploy/crds/README.md): Gateway API's standard channel, for Traefik's Gateway API
# provider and the chart's HTTPRoute; the Prometheus Operator's ServiceMonitor, PodMonitor and PrometheusRule,
# so that the API server checks the chart's (no Operator runs here). Server-side: the HTTPRoute CRD
# is too large for the annotation a client-side apply keeps.
$K apply --server-side --force-conflicts -f "$HERE/../crds/gateway-api-v1.3.0" -f "$HERE/../crds/prometheus-operator-v0.85.0" >/dev/null
$K wait --for=condition=Established crd/gatewayclasses.gateway.networking.k8s.io crd/gateways.gateway.networking.k8s.io \
  crd/httproutes.gateway.networking.k8s.io crd/servicemonitors.monitoring.coreos.com crd/podmonitors.monitoring.coreos.com crd/prometheusrules.monitoring.coreos.com \
  --timeout=60s >/dev/null
for f in coredns traefik; do
  sed "s#@DNS_IP@#$DNS_IP#g; s#@INGRESS_IP@#$INGRESS_IP#g" "$HERE/manifests/$f.yaml" | $K apply -f - >/dev/null
done
$K -n kube-system rollout status deploy/coredns --timeout=180s >/dev/null
$K -n pi-ingress rollout status deploy/traefik --timeout=180s >/dev/null
log "cluster ready in $(( $(date +%s) - t0 ))s: export KUBECONFIG=$KUBECONFIG_ADMIN; ingress at http://$INGRESS_IP"
