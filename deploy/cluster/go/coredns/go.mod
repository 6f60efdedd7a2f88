// Builds CoreDNS (the cluster DNS) with deploy/cluster/build-go.sh, from main.go: the plugins the Corefile uses.

module partner-integration.local/cluster/go/coredns

go 1.24.0

require github.com/coredns/coredns v1.12.1
