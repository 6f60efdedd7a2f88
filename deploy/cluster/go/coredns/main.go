// CoreDNS with only the plugins the cluster's Corefile names (deploy/cluster/manifests/coredns.yaml),
// as CoreDNS documents for building it as a library: its own main imports every plugin (the cloud
// providers' SDKs among them), which is most of its build time. A plugin added to the Corefile must
// be added here.
package main

import (
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"
	_ "github.com/coredns/coredns/plugin/template"

	"github.com/coredns/coredns/coremain"
)

func main() {
	coremain.Run()
}
