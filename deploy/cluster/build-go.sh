#!/usr/bin/env bash
# Builds the cluster's Go programs from their modules into $CACHE/bin/<tool>-<version>/, each through a
# main module of ours under deploy/cluster/go/<tool>/ (which repeats the replace directives of the
# program's own go.mod: Go ignores them outside the main module, and `go install pkg@version` refuses
# modules that have them). A tool whose binaries exist is skipped, so only the first run pays:
#
#   kubernetes  kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kube-proxy, kubeadm,
#               kubectl (about 20 minutes of CPU on 2 cores)
#   coredns     the cluster DNS, only the Corefile's plugins (2 to 3 minutes)
#   traefik     the ingress controller (about 11 minutes)
#   skaffold    optional: `skaffold run -p local-cluster` (about 10 minutes)
#   kube-linter, kubeconform, pint
#               the chart's outside linters (test/deploy/outside-linters.test.ts, docs/operations.md):
#               kube-linter from its source as the module proxy serves it under its GitHub path
#               (github.com/stackrox/kube-linter; its own path, golang.stackrox.io/kube-linter, is not
#               served), built as the main module it declares; kubeconform and pint from their modules
#
#   deploy/cluster/build-go.sh kubernetes coredns traefik
set -euo pipefail
. "$(dirname "$0")/lib.sh"

build_tool() { # tool
  local tool=$1 version pkgs ld=""
  case $tool in
    kubernetes)
      version=$K8S_VERSION
      pkgs="kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubeadm kubectl"
      pkgs=$(for c in $pkgs; do echo "k8s.io/kubernetes/cmd/$c"; done)
      # Helm's kubeVersion check and kubeadm read the version stamped here.
      for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
        ld="$ld -X $p.gitVersion=$version -X $p.gitMajor=1 -X $p.gitMinor=34 -X $p.gitTreeState=clean"
        ld="$ld -X $p.buildDate=1970-01-01T00:00:00Z"
      done ;;
    # Our main (go/coredns/main.go): only the plugins the cluster's Corefile uses.
    coredns) version=v1.12.1; pkgs=partner-integration.local/cluster/go/coredns ;;
    traefik)
      version=v3.5.3; pkgs=github.com/traefik/traefik/v3/cmd/traefik
      ld="-X github.com/traefik/traefik/v3/pkg/version.Version=$version" ;;
    skaffold)
      version=v2.16.1; pkgs=github.com/GoogleContainerTools/skaffold/v2/cmd/skaffold
      ld="-X github.com/GoogleContainerTools/skaffold/v2/pkg/skaffold/version.version=$version" ;;
    kubeconform)
      version=v0.8.0; pkgs=github.com/yannh/kubeconform/cmd/kubeconform
      ld="-X main.version=$version" ;;
    pint)
      version=v0.87.0; pkgs=github.com/cloudflare/pint/cmd/pint
      ld="-X main.version=$version" ;;
    kube-linter)
      version=v0.8.3; pkgs=./cmd/kube-linter
      ld="-X golang.stackrox.io/kube-linter/internal/version.version=$version" ;;
    *) echo "unknown tool: $tool" >&2; return 2 ;;
  esac
  local out=$CACHE/bin/$tool-$version missing="" names=""
  for p in $pkgs; do
    local name=${p##*/}
    [ -x "$out/$name" ] || { missing="$missing $p"; names="$names $name"; }
  done
  [ -z "$missing" ] && return 0
  local work=$CACHE/build/$tool t=$(date +%s)
  mkdir -p "$work" "$out"
  if [ "$tool" = kube-linter ]; then
    # Its module's files (go.mod declares golang.stackrox.io/kube-linter, with its go.sum): the main module.
    local src
    src=$(cd "$work" && go mod download -json "github.com/stackrox/kube-linter@$version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
    [ -n "$src" ] || { echo "cannot download github.com/stackrox/kube-linter@$version" >&2; return 1; }
    cp -r "$src/." "$work/" && chmod -R u+w "$work"
  else
    cp "$HERE/go/$tool/"* "$work/"
  fi
  rm -rf "$out/.partial" && mkdir "$out/.partial"
  # One go build for all of a tool's programs: their shared packages are compiled once and the links
  # overlap. Niced, for the machine's other work; PI_CLUSTER_GO_JOBS packages compile at once (go's -p).
  (cd "$work" && GOFLAGS=-mod=mod CGO_ENABLED=0 GOTOOLCHAIN=local \
    nice -n 10 go build -p "${PI_CLUSTER_GO_JOBS:-4}" -trimpath -ldflags "-s -w $ld" -o "$out/.partial/" $missing)
  for name in $names; do mv "$out/.partial/$name" "$out/$name"; done
  rmdir "$out/.partial"
  log "built $tool ($(echo $names)) in $(( $(date +%s) - t ))s"
}

mkdir -p "$CACHE"
for tool in "$@"; do
  # One build of a tool at a time (a second caller waits, then finds the binaries).
  exec 9>"$CACHE/build-$tool.lock"
  flock 9
  build_tool "$tool"
  exec 9>&-
done
