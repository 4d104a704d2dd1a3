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
#   QUORUMQ_CLUSTER_SECRET the nodes' cluster secret (default: a random one for this run)
#   QUORUMQ_SMOKE_MESSAGES, QUORUMQ_SMOKE_RATE, QUORUMQ_SMOKE_KILL_AT, QUORUMQ_SMOKE_TIMEOUT_S
#                          passed to the client (see cluster/compose-smoke-client.js)
#   SMOKE_KEEP=1           leave the cluster running at the end (for debugging)
set -euo pipefail
cd "$(dirname "$0")/.."

export COMPOSE_PROJECT_NAME="${COMPOSE_PROJECT_NAME:-quorumq-smoke}"
health_timeout="${SMOKE_HEALTH_TIMEOUT:-120}"
ql_name="compose smoke"
# The engine, the lock, the images, up/healthy and the teardown, shared with compose-chaos.sh.
# shellcheck source=cluster/compose-lib.sh
. cluster/compose-lib.sh
log() { ql_log "$@"; }
started=$SECONDS

# --- 1. a Docker engine; one compose run at a time ------------------------------------------
ql_engine
ql_lock

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
  ql_teardown "$status" "${SMOKE_KEEP:-0}"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- 3. images -----------------------------------------------------------------------------
ql_images

# --- 4. cluster up, wait for three healthy nodes --------------------------------------------
ql_up "$health_timeout"

# --- 5. the client-side checks --------------------------------------------------------------
# The client reaches the nodes through the published ports on the loopback, and kills and
# starts the leader's container itself (docker kill / docker start, found by the compose
# project and service labels).
client_started=$SECONDS
QUORUMQ_SMOKE_ADDRESSES="127.0.0.1:7101,127.0.0.1:7102,127.0.0.1:7103" \
QUORUMQ_COMPOSE_PROJECT="$COMPOSE_PROJECT_NAME" \
QUORUMQ_SMOKE_TLS_DIR="$QUORUMQ_CERTS_DIR/client" \
  node "$client"
log "passed in $((SECONDS - started))s (client $((SECONDS - client_started))s)"
