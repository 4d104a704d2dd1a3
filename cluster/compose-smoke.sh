#!/usr/bin/env bash
# Smoke test of the three-node cluster in docker-compose.yml:
#   engine -> base image -> docker-compose build -> up -d -> wait until n1, n2, n3 are
#   healthy -> node cluster/compose-smoke-client.js -> docker-compose down -v (always).
#
# The client (run on the host, through the published ports) publishes values with confirms
# and a producer id, docker-kills the container of the queue's leader part-way, starts it
# again, consumes the queue and fails unless every confirmed value came back exactly once.
# It needs the host's build of @quorumq/client (packages/client/dist: `npm ci` makes it).
# Exit status 0 when it passed (last line "compose smoke: passed in Ns"), non-zero otherwise.
#
# Without a Docker engine (none installed, not root, dockerd will not start) it prints one
# line, "compose smoke: skipped (no Docker engine: <reason>)", and exits 0.
#
# Environment:
#   COMPOSE_PROJECT_NAME   compose project (default quorumq-smoke, apart from a hand-run cluster)
#   QUORUMQ_BASE_IMAGE     base image (default quorumq/node-base:20, made by base-image.sh;
#                          e.g. node:20-bookworm-slim where a registry is reachable)
#   SMOKE_HEALTH_TIMEOUT   seconds to wait for the three healthchecks (default 120)
#   QUORUMQ_SMOKE_MESSAGES, QUORUMQ_SMOKE_RATE, QUORUMQ_SMOKE_KILL_AT, QUORUMQ_SMOKE_TIMEOUT_S
#                          passed to the client (see cluster/compose-smoke-client.js)
#   SMOKE_KEEP=1           leave the cluster running at the end (for debugging)
set -euo pipefail
cd "$(dirname "$0")/.."

export COMPOSE_PROJECT_NAME="${COMPOSE_PROJECT_NAME:-quorumq-smoke}"
health_timeout="${SMOKE_HEALTH_TIMEOUT:-120}"
services=(n1 n2 n3)

log() { echo "compose smoke: $*"; }
skip() { echo "compose smoke: skipped (no Docker engine: $1)"; exit 0; }
started=$SECONDS

# --- 1. a Docker engine ------------------------------------------------------------------
command -v docker >/dev/null 2>&1 || skip "docker client not installed"
if ! docker info >/dev/null 2>&1; then
  [ "$(id -u)" = 0 ] || skip "docker info fails and not root to start dockerd"
  command -v dockerd >/dev/null 2>&1 || skip "docker info fails and dockerd not installed"
  dockerd_log="${DOCKERD_LOG:-/var/log/dockerd.log}"
  nohup dockerd >"$dockerd_log" 2>&1 &
  for _ in $(seq 1 30); do
    docker info >/dev/null 2>&1 && break
    sleep 1
  done
  if ! docker info >/dev/null 2>&1; then
    reason=$(grep -iE 'level=(error|fatal)|failed' "$dockerd_log" 2>/dev/null | tail -n 1 | cut -c1-160)
    skip "dockerd did not start${reason:+: $reason}"
  fi
  log "started dockerd (log: $dockerd_log; it keeps running)"
fi
if command -v docker-compose >/dev/null 2>&1; then
  compose=(docker-compose)
elif docker compose version >/dev/null 2>&1; then
  compose=(docker compose)
else
  skip "docker-compose not installed"
fi

# One smoke run at a time on this engine: runs share the project name and the host ports,
# and a second run's "down -v" would stop the first one's nodes.
if command -v flock >/dev/null 2>&1; then
  exec 9>"${TMPDIR:-/tmp}/quorumq-compose-smoke.lock"
  if ! flock -n 9; then
    log "another smoke run holds the lock; waiting (up to 15 min)"
    flock -w 900 9 || { log "gave up waiting for the other smoke run"; exit 1; }
  fi
fi

# The client runs on the host with the workspace's @quorumq/client: check for its build now
# rather than after the image build.
client=cluster/compose-smoke-client.js
if [ ! -f packages/client/dist/index.js ] || [ ! -e node_modules/@quorumq/client ]; then
  log "@quorumq/client is not built on the host (packages/client/dist); run npm ci (or npm run build) first"
  exit 1
fi

# --- 2. always tear down -------------------------------------------------------------------
cleanup() {
  local status=$?
  if [ "${SMOKE_KEEP:-0}" = 1 ]; then
    log "SMOKE_KEEP=1: leaving project $COMPOSE_PROJECT_NAME up"
  else
    if [ "$status" -ne 0 ]; then
      log "failed; last node logs:"
      "${compose[@]}" logs --no-color --tail=40 2>&1 || true
    fi
    "${compose[@]}" down -v --remove-orphans >/dev/null 2>&1 || true
  fi
  if [ "$status" -eq 0 ] && [ -n "${build_log:-}" ]; then rm -f "$build_log"; fi
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- 3. images -----------------------------------------------------------------------------
if [ -z "${QUORUMQ_BASE_IMAGE:-}" ] || [ "${QUORUMQ_BASE_IMAGE}" = quorumq/node-base:20 ]; then
  bash cluster/base-image.sh
fi
build_log=$(mktemp)
log "building the node image (log: $build_log)"
build_started=$SECONDS
# n1, n2 and n3 share one image (quorumq/node:dev): build it once, through n1; `up` then
# finds it for all three.
if ! "${compose[@]}" build "${services[0]}" >"$build_log" 2>&1; then
  tail -n 60 "$build_log"
  log "docker-compose build failed"
  exit 1
fi
log "node image built in $((SECONDS - build_started))s"

# --- 4. cluster up, wait for three healthy nodes --------------------------------------------
"${compose[@]}" down -v --remove-orphans >/dev/null 2>&1 || true
"${compose[@]}" up -d
log "waiting up to ${health_timeout}s for ${services[*]} to report healthy"
deadline=$((SECONDS + health_timeout))
while :; do
  healthy=0
  states=()
  for s in "${services[@]}"; do
    id=$("${compose[@]}" ps -q "$s")
    state=$(docker inspect -f '{{.State.Status}}/{{if .State.Health}}{{.State.Health.Status}}{{else}}none{{end}}' "$id" 2>/dev/null || echo missing)
    states+=("$s=$state")
    case "$state" in
      running/healthy) healthy=$((healthy + 1)) ;;
      exited/*|dead/*|missing) log "node $s is not running ($state)"; exit 1 ;;
    esac
  done
  [ "$healthy" -eq "${#services[@]}" ] && break
  if [ "$SECONDS" -ge "$deadline" ]; then
    log "timed out waiting for healthy nodes: ${states[*]}"
    exit 1
  fi
  sleep 2
done
log "all nodes healthy: ${states[*]}"

# --- 5. the client-side checks --------------------------------------------------------------
# The client reaches the nodes through the published ports on the loopback, and kills and
# starts the leader's container itself (docker kill / docker start, found by the compose
# project and service labels).
client_started=$SECONDS
QUORUMQ_SMOKE_ADDRESSES="127.0.0.1:7101,127.0.0.1:7102,127.0.0.1:7103" \
QUORUMQ_COMPOSE_PROJECT="$COMPOSE_PROJECT_NAME" \
  node "$client"
log "passed in $((SECONDS - started))s (client $((SECONDS - client_started))s)"
