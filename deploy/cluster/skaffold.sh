#!/usr/bin/env bash
# Skaffold against the cluster of up.sh, with skaffold.yaml's `local-cluster` profile: every image
# built here (images/skaffold-build.sh) and loaded into the node by the tag Skaffold deploys
# (images/skaffold-load.sh, the Helm deployer's `before` hook), then the chart installed with
# values.yaml into the namespace partner-integration.
#
#   deploy/cluster/skaffold.sh run        # build, load, helm install --wait; every pod Ready
#   deploy/cluster/skaffold.sh dev        # the same, again at every change of the sources
#   deploy/cluster/skaffold.sh delete     # helm uninstall
#
# Skaffold v2.16.1 is built once from its Go module (build-go.sh skaffold, cached like Kubernetes);
# helm is the project's (deploy/checks/helm.mjs) and kubectl the cluster's; a Docker engine is
# started if none runs (Skaffold asks it for the built images' ids before it builds anything); the
# storage pool's released volumes are made available again (storage.sh).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
ROOT=$(cd "$HERE/../.." && pwd)
[ $# -gt 0 ] || { sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
[ -f "$KUBECONFIG_ADMIN" ] || { echo "no cluster: run deploy/cluster/up.sh first" >&2; exit 1; }
"$HERE/build-go.sh" skaffold
HELM=$(cd "$ROOT" && node deploy/checks/helm.mjs)
ensure_docker
# Volumes whose claims an earlier `delete` released are wiped and offered again (as test:cluster
# does after its uninstall): the pool has ten, and each install claims five.
"$HERE/storage.sh"
export KUBECONFIG=$KUBECONFIG_ADMIN PATH=$CACHE/bin/skaffold-v2.16.1:$(dirname "$HELM"):$BIN:$PATH
cd "$ROOT"
exec skaffold "$@" -p local-cluster
