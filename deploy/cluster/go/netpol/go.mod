// Builds kube-network-policies (enforces NetworkPolicies on the bridge, from the host) with
// deploy/cluster/build-go.sh.

module partner-integration.local/cluster/go/netpol

go 1.23.0

require sigs.k8s.io/kube-network-policies v0.7.0
