#!/usr/bin/env bash
# Schemathesis against the local stack: `npm start` on a temporary STATE_DIR and ports of its own, a
# partner made with the operator CLI, a bearer token, then `schemathesis run` over the OpenAPI
# document the gateway serves. Fails on any 5xx or any answer that strays from the document.
#
#   bash deploy/checks/schemathesis.sh            (CI runs it after npm test)
#
# Settings: SCHEMATHESIS_MAX_EXAMPLES (default 100 per operation), SCHEMATHESIS_SEED (default fixed, so
# a CI failure replays), SCHEMATHESIS_PORT_BASE (default 58000: gateway 58080,
# MongoDB-wire server 57017, Kafka 59092-59093). Reports go to .state/schemathesis/.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)

version=4.32.5
venv="$root/.state/cache/schemathesis-$version"
max_examples=${SCHEMATHESIS_MAX_EXAMPLES:-100}
seed=${SCHEMATHESIS_SEED:-20260101}
base=${SCHEMATHESIS_PORT_BASE:-58000}
reports="$root/.state/schemathesis"

log() { printf '{"level":"info","time":"%s","service":"schemathesis-check","msg":%s}\n' "$(date -u +%FT%TZ)" "$(python3 -c 'import json,sys; print(json.dumps(sys.argv[1]))' "$1")" >&2; }

source "$root/deploy/checks/local-stack.sh"

# --- schemathesis, from PyPI, in a venv of its own (pinned; cached across runs) ---
if [ ! -x "$venv/bin/schemathesis" ]; then
  log "installing schemathesis $version into $venv"
  rm -rf "$venv"
  make_venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "schemathesis==$version"
fi
"$venv/bin/schemathesis" --version >/dev/null

# --- the local stack ---
start_local_stack "$base" schemathesis

# --- a partner, a token, and an approved connection to the document's example elder, so that the
# examples of POST /v1/files reach an accepted file (and its link, GET /v1/files/{id}, a real one) ---
example_elder=apple.pear.plum@elders.example
partner=$(npm run --silent ops -- partner create --name "Schemathesis" --json)
npm run --silent ops -- elder create --address "$example_elder" --json >/dev/null
read -r token connection_id < <(python3 - "$gateway" "$partner" "$example_elder" <<'PY'
import json, sys, urllib.parse, urllib.request
gateway, partner, elder = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
body = urllib.parse.urlencode({"grant_type": "client_credentials", "client_id": partner["live"]["client_id"], "client_secret": partner["live"]["client_secret"]}).encode()
req = urllib.request.Request(gateway + "/oauth/token", data=body, headers={"content-type": "application/x-www-form-urlencoded"})
token = json.load(urllib.request.urlopen(req, timeout=10))["access_token"]
req = urllib.request.Request(gateway + "/v1/connections", data=json.dumps({"elder": elder}).encode(),
                             headers={"content-type": "application/json", "authorization": "Bearer " + token})
print(token, json.load(urllib.request.urlopen(req, timeout=10))["id"])
PY
)
npm run --silent ops -- connection approve "$connection_id" --json >/dev/null

# The test helpers (tag "Test helpers") exist only for a test token: a live token gets the 404 of a
# path with no operation whatever the method, so they are left out of the live token's run and get a
# run of their own with a test token.
test_token=$(python3 - "$gateway" "$partner" <<'PY'
import json, sys, urllib.parse, urllib.request
gateway, partner = sys.argv[1], json.loads(sys.argv[2])
body = urllib.parse.urlencode({"grant_type": "client_credentials", "client_id": partner["test"]["client_id"], "client_secret": partner["test"]["client_secret"]}).encode()
req = urllib.request.Request(gateway + "/oauth/token", data=body, headers={"content-type": "application/x-www-form-urlencoded"})
print(json.load(urllib.request.urlopen(req, timeout=10))["access_token"])
PY
)

# --- the runs ---
mkdir -p "$reports" "$reports/test-helpers"
log "schemathesis run: $max_examples examples per operation, seed $seed"
run_schemathesis() { # token, report directory, log file, then the operations' filter
  local bearer=$1 dir=$2 out=$3
  shift 3
  "$venv/bin/schemathesis" run "$gateway/openapi.json" \
    --header "Authorization: Bearer $bearer" \
    "$@" \
    --checks not_a_server_error,status_code_conformance,content_type_conformance,response_headers_conformance,response_schema_conformance,unsupported_method,allow_header_conformance \
    --phases examples,coverage,fuzzing,stateful \
    --max-examples "$max_examples" \
    --seed "$seed" \
    --workers 1 \
    --request-timeout 30 \
    --generation-allow-x00 false \
    --report junit --report-dir "$dir" \
    --no-color >"$out" 2>&1
}
set +e
run_schemathesis "$token" "$reports" "$reports/run.log" --exclude-tag "Test helpers"
status=$?
run_schemathesis "$test_token" "$reports/test-helpers" "$reports/test-helpers/run.log" --include-tag "Test helpers"
helpers_status=$?
[ "$status" = 0 ] && status=$helpers_status
set -e
# Schemathesis closes with a pytest-style summary; CI's output must end with our test totals alone,
# so its report stays in the log and one line of ours says how it went.
cases=$(grep -Eo '[0-9]+ generated, [0-9]+ passed[^|]*' "$reports/run.log" | tail -n 1 || true)
helper_cases=$(grep -Eo '[0-9]+ generated, [0-9]+ passed[^|]*' "$reports/test-helpers/run.log" | tail -n 1 || true)
log "schemathesis exit $status: ${cases:-no case count found}; test helpers (test token): ${helper_cases:-no case count found} (full reports: $reports/run.log, $reports/test-helpers/run.log)"

# Belt and braces: the gateway's own access log must not show a single 5xx on the partner API
# either (/readyz answers 503 on purpose while the stack starts).
api_fives() { grep -h '"msg":"request"' "$state"/logs/gateway.log 2>/dev/null | grep -E '"path":"/(v1|oauth)' | grep -E '"status":5[0-9]{2}' || true; }
fives=$(api_fives | wc -l)
if [ "$fives" != "0" ]; then
  echo "schemathesis check: the gateway logged $fives partner API answers with a 5xx status:" >&2
  api_fives | head -n 5 >&2
  status=1
fi
if [ "$status" != 0 ]; then
  KEEP_STACK_STATE=1
  grep -v '^=\{3,\}' "$reports/run.log" | tail -n 40 >&2
  grep -v '^=\{3,\}' "$reports/test-helpers/run.log" | tail -n 20 >&2
  echo "schemathesis check failed (exit $status); stack logs kept in $state/logs, reports in $reports" >&2
fi
exit "$status"
