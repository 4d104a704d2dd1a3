# Shared steps of the scripts that run the docker-compose cluster (compose-smoke.sh,
# compose-chaos.sh): a Docker engine, one run at a time, the images, the cluster up and
# healthy, the teardown. Sourced (not run) from the repository root, after setting
#   ql_name                the log prefix, e.g. "compose smoke"
#   COMPOSE_PROJECT_NAME   the compose project
# Functions:
#   ql_engine              makes sure an engine answers (starts dockerd as root), sets the
#                          `compose` command array; without one prints
#                          "<ql_name>: skipped (no Docker engine: <reason>)" and exits 0
#   ql_lock                waits for the lock every compose run on this engine shares (they
#                          publish the same host ports 7101-7103, 9111-9113)
#   ql_require_dist FILE   exits 1 unless the host build FILE exists (npm ci makes it)
#   ql_images              base image (cluster/base-image.sh) and the node image
#   ql_certs               the cluster's certificates (cluster/make-certs.sh into
#                          QUORUMQ_CERTS_DIR, default cluster/certs; kept between runs),
#                          exports QUORUMQ_CERTS_DIR as an absolute path
#   ql_up SECONDS          down -v, up -d (with a random QUORUMQ_CLUSTER_SECRET unless one
#                          is set), waits up to SECONDS for three healthy nodes
#   ql_teardown STATUS KEEP  the end (from an EXIT trap): on failure the nodes' last log
#                          lines; unpause, down -v --remove-orphans (unless KEEP=1)
# Environment: QUORUMQ_BASE_IMAGE (default quorumq/node-base:20, made by base-image.sh),
# QUORUMQ_CLUSTER_SECRET (default: random per run), QUORUMQ_CERTS_DIR (default cluster/certs),
# DOCKERD_LOG (default /var/log/dockerd.log).

ql_services=(n1 n2 n3)
ql_lock_file="${TMPDIR:-/tmp}/quorumq-compose-smoke.lock"

ql_log() { echo "$ql_name: $*"; }
ql_skip() { echo "$ql_name: skipped (no Docker engine: $1)"; exit 0; }

ql_engine() {
  command -v docker >/dev/null 2>&1 || ql_skip "docker client not installed"
  if ! docker info >/dev/null 2>&1; then
    [ "$(id -u)" = 0 ] || ql_skip "docker info fails and not root to start dockerd"
    command -v dockerd >/dev/null 2>&1 || ql_skip "docker info fails and dockerd not installed"
    local dockerd_log="${DOCKERD_LOG:-/var/log/dockerd.log}"
    nohup dockerd >"$dockerd_log" 2>&1 &
    for _ in $(seq 1 30); do
      docker info >/dev/null 2>&1 && break
      sleep 1
    done
    if ! docker info >/dev/null 2>&1; then
      local reason
      reason=$(grep -iE 'level=(error|fatal)|failed' "$dockerd_log" 2>/dev/null | tail -n 1 | cut -c1-160)
      ql_skip "dockerd did not start${reason:+: $reason}"
    fi
    ql_log "started dockerd (log: $dockerd_log; it keeps running)"
  fi
  if command -v docker-compose >/dev/null 2>&1; then
    compose=(docker-compose)
  elif docker compose version >/dev/null 2>&1; then
    compose=(docker compose)
  else
    ql_skip "docker-compose not installed"
  fi
}

# One compose run at a time on this engine (the smoke test and the chaos runner alike): they
# publish the same host ports, and a run's "down -v" must not hit another run's cluster.
ql_lock() {
  command -v flock >/dev/null 2>&1 || return 0
  exec 9>"$ql_lock_file"
  if ! flock -n 9; then
    ql_log "another compose run holds the lock ($ql_lock_file); waiting (up to 15 min)"
    flock -w 900 9 || { ql_log "gave up waiting for the other compose run"; exit 1; }
  fi
}

ql_require_dist() {
  if [ ! -f "$1" ]; then
    ql_log "$1 is not built on the host; run npm ci (or npm run build) first"
    exit 1
  fi
}

ql_images() {
  if [ -z "${QUORUMQ_BASE_IMAGE:-}" ] || [ "${QUORUMQ_BASE_IMAGE}" = quorumq/node-base:20 ]; then
    bash cluster/base-image.sh
  fi
  ql_build_log=$(mktemp)
  ql_log "building the node image (log: $ql_build_log)"
  local build_started=$SECONDS
  # n1, n2 and n3 share one image (quorumq/node:dev): build it once, through n1; `up` then
  # finds it for all three.
  if ! "${compose[@]}" build "${ql_services[0]}" >"$ql_build_log" 2>&1; then
    tail -n 60 "$ql_build_log"
    ql_log "docker-compose build failed"
    exit 1
  fi
  ql_log "node image built in $((SECONDS - build_started))s"
}

# The nodes serve clients over TLS and each other over mutual TLS (docker-compose.yml mounts
# QUORUMQ_CERTS_DIR/nX into node nX); clients on the host use QUORUMQ_CERTS_DIR/client.
ql_certs() {
  QUORUMQ_CERTS_DIR="${QUORUMQ_CERTS_DIR:-cluster/certs}"
  bash cluster/make-certs.sh "$QUORUMQ_CERTS_DIR" "${ql_services[@]}" >/dev/null
  QUORUMQ_CERTS_DIR=$(cd "$QUORUMQ_CERTS_DIR" && pwd)
  export QUORUMQ_CERTS_DIR
  ql_log "certificates in $QUORUMQ_CERTS_DIR (client: $QUORUMQ_CERTS_DIR/client)"
}

ql_up() {
  local health_timeout="$1" up_started=$SECONDS
  ql_certs
  # The nodes' cluster secret (docker-compose.yml hands it to every node): a random one per
  # run unless QUORUMQ_CLUSTER_SECRET is set, so no run uses the documented development one.
  # `docker start` of a killed node keeps its container's environment, hence the same secret.
  if [ -z "${QUORUMQ_CLUSTER_SECRET:-}" ]; then
    QUORUMQ_CLUSTER_SECRET=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')
  fi
  export QUORUMQ_CLUSTER_SECRET
  "${compose[@]}" down -v --remove-orphans >/dev/null 2>&1 || true
  "${compose[@]}" up -d
  ql_log "waiting up to ${health_timeout}s for ${ql_services[*]} to report healthy"
  local deadline=$((SECONDS + health_timeout)) healthy s id state
  while :; do
    healthy=0
    ql_states=()
    for s in "${ql_services[@]}"; do
      id=$("${compose[@]}" ps -q "$s")
      state=$(docker inspect -f '{{.State.Status}}/{{if .State.Health}}{{.State.Health.Status}}{{else}}none{{end}}' "$id" 2>/dev/null || echo missing)
      ql_states+=("$s=$state")
      case "$state" in
        running/healthy) healthy=$((healthy + 1)) ;;
        exited/*|dead/*|missing) ql_log "node $s is not running ($state)"; exit 1 ;;
      esac
    done
    [ "$healthy" -eq "${#ql_services[@]}" ] && break
    if [ "$SECONDS" -ge "$deadline" ]; then
      ql_log "timed out waiting for healthy nodes: ${ql_states[*]}"
      exit 1
    fi
    sleep 2
  done
  ql_log "all nodes healthy after $((SECONDS - up_started))s: ${ql_states[*]}"
}

ql_teardown() {
  local status="$1" keep="$2"
  if [ "$keep" = 1 ]; then
    ql_log "keep: leaving project $COMPOSE_PROJECT_NAME up (${compose[*]:-docker-compose} -p $COMPOSE_PROJECT_NAME down -v removes it)"
  elif [ "${#compose[@]}" -gt 0 ]; then
    if [ "$status" -ne 0 ]; then
      ql_log "failed; last node logs:"
      "${compose[@]}" logs --no-color --tail=40 2>&1 || true
    fi
    # A container a run left paused would make the stop wait; unpause it first.
    docker ps -q --filter "label=com.docker.compose.project=$COMPOSE_PROJECT_NAME" --filter status=paused \
      | xargs -r docker unpause >/dev/null 2>&1 || true
    local down_started=$SECONDS
    "${compose[@]}" down -v --remove-orphans >/dev/null 2>&1 || true
    ql_log "removed project $COMPOSE_PROJECT_NAME (down -v) in $((SECONDS - down_started))s"
  fi
  if [ "$status" -eq 0 ] && [ -n "${ql_build_log:-}" ]; then rm -f "$ql_build_log"; fi
}

compose=()
