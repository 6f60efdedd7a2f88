#!/usr/bin/env bash
# Partners' own tools against the local stack (npm start): OAuth client libraries of Python
# (requests-oauthlib, authlib), Go (golang.org/x/oauth2/clientcredentials) and Node (simple-oauth2),
# each in its default mode and in body mode, each token used on /v1; Authlib's PrivateKeyJWT with
# RS384 and ES384 keys on a token endpoint it discovered from the RFC 8414 metadata, and that
# metadata read by oauth4webapi's discovery too; webhook deliveries verified with
# Stripe's official verifiers in Python and Node, through a signing-secret rotation and a resend.
#
#   bash deploy/checks/partner-tools.sh            (CI runs it after npm test)
#
# Against an installed release instead of npm start (test:cluster's step "partner tools through the
# ingress", deploy/cluster/test-cluster.sh): PARTNER_TOOLS_GATEWAY (the external URL, https), PT_CA
# (the CAs every tool trusts: Python's requests by REQUESTS_CA_BUNDLE, Go by SSL_CERT_FILE, Node by
# NODE_EXTRA_CA_CERTS), PT_RESOLVE (name=address of the ingress: each tool connects there for the
# name, TLS verified for the name), PT_OPS (the operator CLI there, through kubectl exec -i) and
# PT_WEBHOOK_RECEIVER (where the cluster reaches the webhook receiver: run.mjs). Results then go to
# .state/partner-tools-cluster/.
#
# Tools are pinned (deploy/checks/partner-tools/) and cached under .state/cache. Settings:
# PARTNER_TOOLS_PORT_BASE (default 48000: gateway 48080, the MongoDB-wire server 47017,
# Kafka 49092-49093). Each case's outcome goes to .state/partner-tools/run.log; the totals to
# .state/partner-tools/results.json ({"passed", "failed", "cases"}), which .ci/run adds to its count.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
tools="$root/deploy/checks/partner-tools"
base=${PARTNER_TOOLS_PORT_BASE:-48000}
out="$root/.state/partner-tools${PARTNER_TOOLS_GATEWAY:+-cluster}"
mkdir -p "$out"
rm -f "$out/results.json"

log() { printf '{"level":"info","time":"%s","service":"partner-tools-check","msg":%s}\n' "$(date -u +%FT%TZ)" "$(python3 -c 'import json,sys; print(json.dumps(sys.argv[1]))' "$1")" >&2; }
fail_all() {
  printf '{"passed":0,"failed":1,"cases":[{"name":"partner tools set-up","ok":false,"detail":%s}]}\n' "$(python3 -c 'import json,sys; print(json.dumps(sys.argv[1]))' "$1")" >"$out/results.json"
  log "partner tools: $1"
  exit 1
}
source "$root/deploy/checks/local-stack.sh"

# Each tool set in a cache directory named after the hash of its pins: a new pin, a new install.
pins() { cat "$@" | sha256sum | cut -c1-12; }

# --- Python: requests-oauthlib, authlib, stripe ---
venv="$root/.state/cache/partner-tools-py-$(pins "$tools/python/requirements.txt")"
if [ ! -x "$venv/bin/python" ] || [ ! -f "$venv/.installed" ]; then
  log "installing the Python tools into $venv"
  rm -rf "$venv"
  make_venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$tools/python/requirements.txt" >>"$out/install.log" 2>&1 || fail_all "pip install failed (see $out/install.log)"
  touch "$venv/.installed"
fi

# --- Go: golang.org/x/oauth2, its module cache under .state/cache ---
export GOMODCACHE="$root/.state/cache/go-mod" GOFLAGS=-modcacherw GOTOOLCHAIN=local
gobin="$root/.state/cache/partner-tools-go-$(pins "$tools/go/go.mod" "$tools/go/go.sum" "$tools/go/main.go")/oauth-client"
if [ ! -x "$gobin" ]; then
  log "building the Go client"
  (cd "$tools/go" && go build -o "$gobin" .) >>"$out/install.log" 2>&1 || fail_all "go build failed (see $out/install.log)"
fi

# --- Node: simple-oauth2, stripe (outside the workspaces: partners' tools, not ours) ---
nodedir="$root/.state/cache/partner-tools-node-$(pins "$tools/node/package.json" "$tools/node/token.cjs" "$tools/node/verify.cjs" "$tools/node/discovery.mjs")"
if [ ! -f "$nodedir/.installed" ]; then
  log "installing the Node tools into $nodedir"
  rm -rf "$nodedir"
  mkdir -p "$nodedir"
  cp "$tools/node/package.json" "$tools/node/token.cjs" "$tools/node/verify.cjs" "$tools/node/discovery.mjs" "$nodedir/"
  (cd "$nodedir" && npm install --no-audit --no-fund --no-package-lock --silent) >>"$out/install.log" 2>&1 || fail_all "npm install of the Node tools failed (see $out/install.log)"
  touch "$nodedir/.installed"
fi

# --- the stack (or the cluster's release), the cases ---
if [ -n "${PARTNER_TOOLS_GATEWAY:-}" ]; then
  gateway=$PARTNER_TOOLS_GATEWAY
  state=$out
  log "running the partner tools against $gateway (resolved to ${PT_RESOLVE:-its DNS address}, CAs of ${PT_CA:-the system})"
  set +e
  ca=()
  [ -n "${PT_CA:-}" ] && ca=(NODE_EXTRA_CA_CERTS="$PT_CA" REQUESTS_CA_BUNDLE="$PT_CA" SSL_CERT_FILE="$PT_CA")
  env GATEWAY_URL="$gateway" PT_PYTHON="$venv/bin/python" PT_GO_BIN="$gobin" PT_NODE_DIR="$nodedir" \
    E2E_RESOLVE="${PT_RESOLVE:-}" NODE_OPTIONS="--require $root/test/support/resolve.cjs" PYTHONPATH="$tools/python/resolve" \
    "${ca[@]}" node "$tools/run.mjs" >"$out/results.json" 2>"$out/run.log"
  status=$?
else
start_local_stack "$base" partner-tools
log "running the partner tools against $gateway"
set +e
GATEWAY_URL="$gateway" PT_PYTHON="$venv/bin/python" PT_GO_BIN="$gobin" PT_NODE_DIR="$nodedir" \
  node "$tools/run.mjs" >"$out/results.json" 2>"$out/run.log"
status=$?
fi
set -e
if ! python3 -c 'import json,sys; json.load(open(sys.argv[1]))' "$out/results.json" 2>/dev/null; then
  fail_all "run.mjs exited $status without results (see $out/run.log)"
fi
summary=$(python3 - "$out/results.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print(f"{r['passed']} passed, {r['failed']} failed")
for c in r["cases"]:
    if not c["ok"]:
        print("  failed:", c["name"], "-", c.get("detail", "")[:300], file=sys.stderr)
PY
)
log "partner tools: $summary (cases: $out/run.log)"
failed=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["failed"])' "$out/results.json")
if [ "$failed" != 0 ] || [ "$status" != 0 ]; then
  KEEP_STACK_STATE=1
  log "partner tools failed; stack logs kept in $state/logs"
  exit 1
fi
