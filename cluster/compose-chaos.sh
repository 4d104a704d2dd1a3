#!/usr/bin/env bash
# The chaos runner against the docker-compose cluster (`npm run chaos -- --compose [options]`
# runs this script):
#   engine -> lock -> base image -> docker-compose build -> up -d -> three healthy nodes ->
#   node packages/chaos/dist/main.js --compose-project <project> [options] -> down -v (always).
#
# The runner injects its seeded faults into the containers with docker kill / start, pause /
# unpause and network disconnect / connect (see cluster/README.md), heals everything, drains
# every queue and checks the total queue; it writes the JSON report and prints the summary
# line. Options are the runner's (--seed, --duration, --faults, --rate, --report, ...).
# Exit status: the runner's (0 pass, 1 lost or unexpected values, 2 inconclusive or the run
# failed), or 1 when the cluster could not be built or started. The last line is
# "compose chaos: passed in Ns" or "compose chaos: failed (exit status N) after Ns".
#
# Without a Docker engine (none installed, not root, dockerd will not start) it prints one
# line, "compose chaos: skipped (no Docker engine: <reason>)", and exits 0.
#
# It takes the same lock as compose-smoke.sh (the same host ports), and always tears the
# project down, on failure and on SIGTERM / SIGINT too.
#
# Environment:
#   COMPOSE_CHAOS_PROJECT  compose project (default quorumq-chaos, apart from a hand-run
#                          cluster and the smoke test)
#   QUORUMQ_BASE_IMAGE     base image (default quorumq/node-base:20, made by base-image.sh)
#   CHAOS_HEALTH_TIMEOUT   seconds to wait for the three healthchecks (default 120)
#   QUORUMQ_CLUSTER_SECRET the nodes' cluster secret (default: a random one for this run)
#   CHAOS_KEEP=1           leave the cluster running at the end (for debugging)
set -euo pipefail
cd "$(dirname "$0")/.."

export COMPOSE_PROJECT_NAME="${COMPOSE_CHAOS_PROJECT:-quorumq-chaos}"
health_timeout="${CHAOS_HEALTH_TIMEOUT:-120}"
ql_name="compose chaos"
# shellcheck source=cluster/compose-lib.sh
. cluster/compose-lib.sh
started=$SECONDS

ql_engine
ql_lock
# The runner runs on the host: its build (and the client's) must be there.
ql_require_dist packages/chaos/dist/main.js
ql_require_dist packages/client/dist/index.js

runner_status=""
cleanup() {
  local status=$?
  ql_teardown "$status" "${CHAOS_KEEP:-0}"
  if [ -n "$runner_status" ] && [ "$status" -eq 0 ]; then
    ql_log "passed in $((SECONDS - started))s"
  else
    ql_log "failed (exit status $status) after $((SECONDS - started))s"
  fi
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

ql_images
ql_up "$health_timeout"

ql_log "running: node packages/chaos/dist/main.js --compose-project $COMPOSE_PROJECT_NAME --tls-dir $QUORUMQ_CERTS_DIR/client $*"
set +e
node packages/chaos/dist/main.js --compose-project "$COMPOSE_PROJECT_NAME" --tls-dir "$QUORUMQ_CERTS_DIR/client" "$@"
runner_status=$?
set -e
exit "$runner_status"
