#!/usr/bin/env bash
# The Secrets cluster/kubernetes/quorumq.yaml mounts, made in namespace NAMESPACE:
#   quorumq-secrets   cluster-secret (the peers' shared secret), admin-password (the first
#                     administrator's, user "admin"): random, printed once to keep
#   quorumq-tls       ca.crt, and quorumq-<i>.crt / .key per pod: certificates from
#                     cluster/make-certs.sh whose CN is the pod name (the node id peers check),
#                     with the Service names clients use as DNS names
#
#   cluster/kubernetes/make-secrets.sh NAMESPACE [REPLICAS] [CERT_DIR]
#
# Needs kubectl (pointed at the cluster) and openssl. Existing Secrets are left alone (delete
# them to make new ones); the CA in CERT_DIR (default cluster/certs-kubernetes) is kept, so
# certificates made later for more pods are signed by the same CA.
set -euo pipefail
namespace="${1:?usage: make-secrets.sh NAMESPACE [REPLICAS] [CERT_DIR]}"
replicas="${2:-3}"
certs="${3:-cluster/certs-kubernetes}"
here="$(cd "$(dirname "$0")" && pwd)"

nodes=()
for ((i = 0; i < replicas; i++)); do nodes+=("quorumq-$i"); done

if ! kubectl -n "$namespace" get secret quorumq-secrets >/dev/null 2>&1; then
  admin_password="$(openssl rand -base64 24)"
  kubectl -n "$namespace" create secret generic quorumq-secrets \
    --from-literal=cluster-secret="$(openssl rand -hex 32)" \
    --from-literal=admin-password="$admin_password"
  echo "first administrator: admin / $admin_password (shown once; change it with PutUser)"
fi

if ! kubectl -n "$namespace" get secret quorumq-tls >/dev/null 2>&1; then
  # Clients reach the nodes through the Service (quorumq, quorumq.<ns>, quorumq.<ns>.svc) or
  # a pod's own name in the headless Service.
  EXTRA_SANS="DNS:quorumq,DNS:quorumq.$namespace,DNS:quorumq.$namespace.svc,DNS:*.quorumq-headless,DNS:*.quorumq-headless.$namespace.svc" \
    "$here/../make-certs.sh" "$certs" "${nodes[@]}"
  args=(--from-file=ca.crt="$certs/ca/ca.crt")
  for node in "${nodes[@]}"; do
    args+=(--from-file="$node.crt=$certs/$node/node.crt" --from-file="$node.key=$certs/$node/node.key")
  done
  kubectl -n "$namespace" create secret generic quorumq-tls "${args[@]}"
fi
