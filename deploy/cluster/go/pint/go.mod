// Builds pint (the outside check of the chart's Prometheus rules, offline;
// test/deploy/outside-linters.test.ts) with deploy/cluster/build-go.sh, from its module at this exact version.

module partner-integration.local/cluster/go/pint

go 1.26.0

require github.com/cloudflare/pint v0.87.0
