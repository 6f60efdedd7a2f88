# Sourced by the checks that run against `npm start` (schemathesis.sh, partner-tools.sh): the local
# stack on a temporary STATE_DIR with ports of its own, started in its own process group and always
# stopped. Needs `root` (the repository) and `log` from the caller.
#
#   start_local_stack BASE NAME    gateway BASE+80, the MongoDB-wire server BASE-983, Kafka BASE+1092/1093;
#                                  every service replica on a free port of its own, as `npm start` gives
#                                  them (the operator CLI finds them in $state/stack.json); sets
#                                  $gateway and $state; exits if not ready
#   stop_local_stack               (set as the EXIT trap by start_local_stack)
# KEEP_STACK_STATE=1 keeps $state (the stack's logs) after the stop.

start_local_stack() {
  local base=$1 name=$2
  state=$(mktemp -d "${TMPDIR:-/tmp}/pi-$name-XXXXXX")
  gateway="http://127.0.0.1:$((base + 80))"
  export STATE_DIR="$state" INFRA_CACHE_DIR="$root/.state/cache" LOG_LEVEL=info
  export GATEWAY_PORT=$((base + 80))
  # A *_SERVICE_URL set here would name one replica only, and every call would go to it: the stack
  # chooses the services' ports and records them all in its stack.json.
  local service plane
  for service in AUTH CONNECTION FILE_INTAKE WEBHOOK; do
    for plane in SERVICE ADMIN; do unset "${service}_${plane}_PORT" "${service}_${plane}_URL"; done
  done
  export MONGODB_PORT=$((base - 983)) KAFKA_PORT=$((base + 1092)) KAFKA_CONTROLLER_PORT=$((base + 1093))
  export ACCESS_TOKEN_TTL_SECONDS=3600
  unset MONGODB_URI KAFKA_BROKERS

  stack_pid=""
  trap stop_local_stack EXIT
  log "starting the stack (npm start, STATE_DIR=$state, gateway $gateway)"
  # setsid: the stack is its own process group, so nothing here signals it but stop_local_stack.
  setsid npm start >"$state/npm-start.log" 2>&1 &
  stack_pid=$!
  local ready=0
  for _ in $(seq 1 360); do
    if ! kill -0 "$stack_pid" 2>/dev/null; then break; fi
    if python3 -c "import sys,urllib.request; sys.exit(0 if urllib.request.urlopen('$gateway/readyz', timeout=2).status == 200 else 1)" 2>/dev/null; then
      ready=1
      break
    fi
    sleep 0.5
  done
  if [ "$ready" != 1 ]; then
    echo "$name check: the stack did not become ready; npm start said:" >&2
    tail -n 30 "$state/npm-start.log" >&2
    exit 1
  fi
}

stop_local_stack() {
  if [ -n "${stack_pid:-}" ]; then
    if kill -0 "$stack_pid" 2>/dev/null; then
      log "stopping the stack"
      kill -TERM "$stack_pid" 2>/dev/null || true
      for _ in $(seq 1 50); do kill -0 "$stack_pid" 2>/dev/null || break; sleep 0.5; done
    fi
    # Whatever of the stack's process group outlived npm start (Kafka still flushing its log, say)
    # is stopped too, so nothing writes into $state while it is removed.
    kill -TERM -- "-$stack_pid" 2>/dev/null || true
    for _ in $(seq 1 40); do kill -0 -- "-$stack_pid" 2>/dev/null || break; sleep 0.25; done
    kill -KILL -- "-$stack_pid" 2>/dev/null || true
  fi
  # Cleaning up never turns a check's result into a failure.
  if [ "${KEEP_STACK_STATE:-0}" != "1" ] && [ -n "${state:-}" ]; then
    rm -rf "$state" 2>/dev/null || { sleep 1; rm -rf "$state" 2>/dev/null; } || log "left $state behind (still in use)"
  fi
}

# The venv of a check's Python tools under .state/cache (created once; Debian's python3 ships venv separately).
make_venv() {
  local venv=$1
  if ! python3 -m venv "$venv" 2>/dev/null; then
    rm -rf "$venv"
    apt-get install -y -qq python3-venv >/dev/null
    python3 -m venv "$venv"
  fi
}
