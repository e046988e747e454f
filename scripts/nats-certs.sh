#!/usr/bin/env bash
# Makes the TLS files of a NATS cluster with openssl: a CA, and for every
# host a certificate (ECDSA P-256) naming its addresses, good for serving
# clients and for both ends of a route (mutual TLS between the servers).
#
# usage: scripts/nats-certs.sh DIR HOST=ADDR[,ADDR...] [HOST=ADDR...]
#
#   scripts/nats-certs.sh ./nats-tls host-a=10.0.0.1 host-b=10.0.0.2,nats-b.example.org host-c=10.0.0.3
#
# writes
#   DIR/ca.pem, DIR/ca-key.pem        the CA; its key stays here, off the hosts
#   DIR/HOST/ca.pem                   copy DIR/HOST/* to /etc/tpcoord/nats/ on HOST
#   DIR/HOST/server.pem, server-key.pem
# An ADDR is an IP address or a DNS name: list every name clients and the
# other servers use for the host (the URLs in TPC_NATS and in the routes).
# An existing CA in DIR is reused, so a host added later gets a certificate
# from the same CA; an existing host directory is left alone (delete it to
# renew). Keys are written mode 0600. NATS_CERT_DAYS (default 825) sets the
# hosts' validity, NATS_CA_DAYS (default 3650) the CA's.
set -euo pipefail

usage() { sed -n '2,19s/^# \{0,1\}//p' "$0"; }

if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then usage; exit 0; fi
if [ $# -lt 2 ]; then usage >&2; exit 2; fi
command -v openssl >/dev/null 2>&1 || { echo "nats-certs.sh: openssl is not installed" >&2; exit 1; }
dir=$1
shift
for spec in "$@"; do
  host=${spec%%=*}
  if [ "$host" = "$spec" ] || [ -z "$host" ] || [ -z "${spec#*=}" ] || [[ "$host" == */* || "$host" == .* ]]; then
    echo "nats-certs.sh: '$spec' is not HOST=ADDR[,ADDR...]" >&2
    exit 2
  fi
done
host_days=${NATS_CERT_DAYS:-825}
ca_days=${NATS_CA_DAYS:-3650}
umask 077
mkdir -p "$dir"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# A minimal openssl configuration, so that the system's (which may add
# extensions of its own to every certificate) plays no part.
cat >"$tmp/openssl.cnf" <<'CNF'
[req]
distinguished_name = dn
prompt = no
[dn]
[ca]
basicConstraints = critical, CA:TRUE, pathlen:0
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
CNF

# hostext SAN prints a host certificate's extensions. serverAuth: clients
# and routing servers verify it; clientAuth: the server presents it when it
# opens a route (cluster tls verify: true).
hostext() {
  printf '%s\n' '[host]' 'basicConstraints = critical, CA:FALSE' 'keyUsage = critical, digitalSignature' \
    'extendedKeyUsage = serverAuth, clientAuth' 'subjectKeyIdentifier = hash' \
    'authorityKeyIdentifier = keyid' "subjectAltName = $1"
}

newkey() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }
serial() { echo "0x$(openssl rand -hex 16)"; }

if [ ! -f "$dir/ca.pem" ]; then
  newkey "$dir/ca-key.pem"
  openssl req -new -x509 -config "$tmp/openssl.cnf" -extensions ca -key "$dir/ca-key.pem" \
    -subj "/CN=tpcoord NATS CA" -days "$ca_days" -set_serial "$(serial)" -out "$dir/ca.pem"
  chmod 0644 "$dir/ca.pem"
  echo "nats-certs.sh: made the CA $dir/ca.pem"
fi
[ -f "$dir/ca-key.pem" ] || { echo "nats-certs.sh: $dir/ca.pem has no $dir/ca-key.pem next to it" >&2; exit 1; }

for spec in "$@"; do
  host=${spec%%=*}
  if [ -e "$dir/$host" ]; then
    echo "nats-certs.sh: $dir/$host exists; left alone"
    continue
  fi
  san=""
  IFS=, read -ra addrs <<<"${spec#*=}"
  for a in "${addrs[@]}"; do
    if [[ "$a" =~ ^[0-9.]+$ || "$a" == *:* ]]; then san+="${san:+,}IP:$a"; else san+="${san:+,}DNS:$a"; fi
  done
  out=$tmp/$host
  mkdir "$out"
  newkey "$out/server-key.pem"
  openssl req -new -config "$tmp/openssl.cnf" -key "$out/server-key.pem" -subj "/CN=$host" -out "$tmp/$host.csr"
  hostext "$san" >"$tmp/$host.ext"
  openssl x509 -req -in "$tmp/$host.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca-key.pem" -set_serial "$(serial)" \
    -days "$host_days" -extfile "$tmp/$host.ext" -extensions host -out "$out/server.pem" 2>/dev/null
  cp "$dir/ca.pem" "$out/ca.pem"
  chmod 0644 "$out/server.pem" "$out/ca.pem"
  chmod 0755 "$out"
  mv "$out" "$dir/$host"
  echo "nats-certs.sh: made $dir/$host/server.pem for $san"
done
