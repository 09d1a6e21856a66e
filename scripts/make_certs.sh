#!/usr/bin/env bash
# Development PKI for mutual TLS between the roles: one CA and one certificate per role, with openssl.
#
#   scripts/make_certs.sh DIR [names...]
#
# Writes DIR/ca.crt, DIR/ca.key and DIR/<name>.crt, DIR/<name>.key for every name (default: trainer,
# master, worker0..worker3). Each certificate is valid for TLS server and client use; its subjectAltName
# holds localhost, 127.0.0.1, ::1, its own name and the compose service names (trainer, master,
# worker0..N, N = the highest worker index given, at least 3) so any role can be dialled by IP or by its
# compose name. Point the config at DIR with `tls: {enabled: true, dir: DIR}`.
# Development only: keys (EC P-256) are unencrypted; an existing CA in DIR is reused so certificates can be added.
set -euo pipefail

if [ $# -lt 1 ] || [ "$1" = "-h" ] || [ "$1" = "--help" ]; then
    sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'
    [ $# -lt 1 ] && exit 2 || exit 0
fi
command -v openssl >/dev/null || { echo "make_certs.sh: openssl not found (apt-get install openssl)" >&2; exit 1; }

dir=$1
shift
names=("$@")
[ ${#names[@]} -gt 0 ] || names=(trainer master worker0 worker1 worker2 worker3)
days=${CERT_DAYS:-825}

max_worker=3
for n in "${names[@]}"; do
    if ! [[ $n =~ ^[A-Za-z0-9][A-Za-z0-9._-]*$ ]]; then
        echo "make_certs.sh: bad name '$n' (letters, digits, . _ -)" >&2
        exit 2
    fi
    if [[ $n =~ ^worker([0-9]+)$ ]] && [ "${BASH_REMATCH[1]}" -gt "$max_worker" ]; then
        max_worker=${BASH_REMATCH[1]}
    fi
done

san="DNS:localhost,IP:127.0.0.1,IP:::1,DNS:trainer,DNS:master"
for i in $(seq 0 "$max_worker"); do
    san="$san,DNS:worker$i"
done

mkdir -p "$dir"
umask 077
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

if [ ! -s "$dir/ca.crt" ] || [ ! -s "$dir/ca.key" ]; then
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -sha256 -days "$days" -keyout "$dir/ca.key" -out "$dir/ca.crt" \
        -subj "/CN=cnnvideo development CA" \
        -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
    echo "CA: $dir/ca.crt"
fi

for n in "${names[@]}"; do
    extra=""
    case ",$san," in *",DNS:$n,"*) ;; *) extra=",DNS:$n" ;; esac
    cat >"$tmp/$n.ext" <<EOF
basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth,clientAuth
subjectAltName=$san$extra
EOF
    openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -sha256 -keyout "$dir/$n.key" -out "$tmp/$n.csr" \
        -subj "/CN=$n" 2>/dev/null
    openssl x509 -req -in "$tmp/$n.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" -CAcreateserial \
        -CAserial "$tmp/ca.srl" -days "$days" -sha256 -extfile "$tmp/$n.ext" -out "$dir/$n.crt" 2>/dev/null
    openssl verify -CAfile "$dir/ca.crt" "$dir/$n.crt" >/dev/null
    echo "$n: $dir/$n.crt ($san$extra)"
done
chmod 644 "$dir"/*.crt
