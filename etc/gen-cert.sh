#!/usr/bin/env bash
# Makes the self-signed ECDSA P-256 certificate etc/tempesta.conf uses, in etc/certs/
# (tempesta.crt, tempesta.key), unless it is already there. Usage: etc/gen-cert.sh [--force]
set -euo pipefail
dir="$(cd "$(dirname "$0")" && pwd)/certs"
mkdir -p "$dir"
if [ -s "$dir/tempesta.crt" ] && [ -s "$dir/tempesta.key" ] && [ "${1:-}" != "--force" ]; then
    exit 0
fi
openssl req -x509 -nodes -days 365 -subj "/CN=tempesta-tech.com" \
    -addext "subjectAltName=DNS:tempesta-tech.com,DNS:localhost,IP:127.0.0.1" \
    -newkey ec -pkeyopt ec_paramgen_curve:P-256 \
    -keyout "$dir/tempesta.key" -out "$dir/tempesta.crt" 2>/dev/null
echo "etc/gen-cert.sh: wrote $dir/tempesta.crt and tempesta.key"
