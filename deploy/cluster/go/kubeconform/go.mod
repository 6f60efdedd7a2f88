// Builds kubeconform (the chart's outside schema check, test/deploy/outside-linters.test.ts) with
// deploy/cluster/build-go.sh, from its module at this exact version.

module partner-integration.local/cluster/go/kubeconform

go 1.26

require github.com/yannh/kubeconform v0.8.0
