#!/usr/bin/env bash
# Certificates for the docker-compose cluster (or any cluster): a CA, one certificate per
# node and a client certificate, made with openssl (EC P-256 keys, unencrypted PEM).
#
#   cluster/make-certs.sh [DIR] [NODE...]     default DIR cluster/certs, nodes n1 n2 n3
#
# Layout of DIR (what docker-compose.yml mounts):
#   ca/ca.crt, ca/ca.key        the CA; its key signs the others (keep it off the nodes)
#   <node>/ca.crt               the CA certificate, a copy
#   <node>/node.crt, node.key   the node's certificate: CN and DNS name the node id, plus
#                               DNS:localhost and IP:127.0.0.1, for server and client use (the
#                               node shows it to clients and peers, and to the peers it dials)
#   client/ca.crt, client.crt, client.key   a client certificate (CN "client")
# Each node's directory is mounted read-only into its container at /etc/quorumq/tls: a node
# sees its own key only. The keys are mode 0600; a node's key is given to uid 1000 (the
# image's `node` user) when the script runs as root, or made readable by all (0644, with a
# note) when it runs as another user than uid 1000, so that the container can read it.
#
# An existing CA is kept (its certificates stay valid); certificates missing for a node or
# the client are made with it. Remove DIR to start over. Environment: CERT_DAYS (825),
# CA_DAYS (3650), CA_SUBJECT ("quorumq cluster CA"), EXTRA_SANS (more subject alternative
# names for every node certificate, e.g. "DNS:broker.example,DNS:*.quorumq-headless": the
# names clients reach the nodes by).
set -euo pipefail

dir="${1:-cluster/certs}"
shift || true
nodes=("$@")
[ "${#nodes[@]}" -gt 0 ] || nodes=(n1 n2 n3)
cert_days="${CERT_DAYS:-825}"
command -v openssl >/dev/null 2>&1 || { echo "make-certs: openssl is not installed" >&2; exit 1; }

umask 077
mkdir -p "$dir/ca"
ec_key=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)

if [ ! -f "$dir/ca/ca.crt" ] || [ ! -f "$dir/ca/ca.key" ]; then
  openssl req -x509 "${ec_key[@]}" -keyout "$dir/ca/ca.key" -out "$dir/ca/ca.crt" \
    -days "${CA_DAYS:-3650}" -subj "/CN=${CA_SUBJECT:-quorumq cluster CA}" \
    -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign 2>/dev/null
  echo "make-certs: made the CA in $dir/ca"
fi

# leaf DIR FILE CN SAN: a certificate signed by the CA, for server and client use.
leaf() {
  local out="$1" file="$2" cn="$3" san="$4" ext
  if [ -f "$out/$file.crt" ] && [ -f "$out/$file.key" ]; then return 0; fi
  mkdir -p "$out"
  ext=$(mktemp)
  {
    echo "basicConstraints=CA:FALSE"
    echo "keyUsage=critical,digitalSignature,keyEncipherment"
    echo "extendedKeyUsage=serverAuth,clientAuth"
    [ -n "$san" ] && echo "subjectAltName=$san"
  } >"$ext"
  openssl req -new "${ec_key[@]}" -keyout "$out/$file.key" -out "$out/$file.csr" -subj "/CN=$cn" 2>/dev/null
  openssl x509 -req -in "$out/$file.csr" -CA "$dir/ca/ca.crt" -CAkey "$dir/ca/ca.key" -CAcreateserial \
    -out "$out/$file.crt" -days "$cert_days" -extfile "$ext" 2>/dev/null
  rm -f "$out/$file.csr" "$ext"
  echo "make-certs: made $out/$file.crt (CN=$cn${san:+, $san})"
}

for node in "${nodes[@]}"; do
  leaf "$dir/$node" node "$node" "DNS:$node,DNS:localhost,IP:127.0.0.1${EXTRA_SANS:+,$EXTRA_SANS}"
  cp "$dir/ca/ca.crt" "$dir/$node/ca.crt"
  chmod 0755 "$dir/$node"
  chmod 0644 "$dir/$node/ca.crt" "$dir/$node/node.crt"
  if [ "$(id -u)" = 0 ]; then
    chown 1000:1000 "$dir/$node/node.key"
  elif [ "$(id -u)" != 1000 ]; then
    chmod 0644 "$dir/$node/node.key"
    echo "make-certs: note: $dir/$node/node.key is readable by all, so that the container's user (uid 1000) can read it"
  fi
done
leaf "$dir/client" client client ""
cp "$dir/ca/ca.crt" "$dir/client/ca.crt"
chmod 0755 "$dir" "$dir/client"
chmod 0644 "$dir/client/ca.crt" "$dir/client/client.crt"
echo "make-certs: certificates in $dir (nodes: ${nodes[*]}; client: $dir/client)"
