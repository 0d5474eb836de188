#!/usr/bin/env bash
# What a TLS server offers, as a client sees it: one `openssl s_client` handshake per protocol
# version, TLS 1.3 suite, TLS 1.2 cipher (every one the local OpenSSL knows) and TLS 1.3 group,
# and which group the server picks when the client's first key share is P-256 but it also
# lists X25519. Compares the proxy's builds with nginx (docs/PERFORMANCE.md, "Handshake cost").
#
#   benches/ab/tls_offer.sh PORT [SNI]        # a server on 127.0.0.1:PORT
#
# Nothing is started or stopped: run the server first. Every probe is bounded (5 s).
set -uo pipefail
port=${1:?usage: tls_offer.sh PORT [SNI]}
sni=${2:-tempesta-tech.com}
try() {
    timeout 5 openssl s_client -connect "127.0.0.1:$port" -servername "$sni" "$@" </dev/null 2>/dev/null
}
printf 'versions:'
for v in tls1 tls1_1 tls1_2 tls1_3; do
    try "-$v" -cipher 'ALL:@SECLEVEL=0' | grep -q '^New, TLS' && printf ' %s' "$v"
done
printf '\ntls1.3 suites:'
for s in TLS_AES_128_GCM_SHA256 TLS_AES_256_GCM_SHA384 TLS_CHACHA20_POLY1305_SHA256 \
    TLS_AES_128_CCM_SHA256 TLS_AES_128_CCM_8_SHA256; do
    try -tls1_3 -ciphersuites "$s" | grep -q '^New, TLSv1.3' && printf ' %s' "$s"
done
printf '\ntls1.2 suites:'
for c in $(openssl ciphers 'ALL:COMPLEMENTOFALL:@SECLEVEL=0' | tr ':' ' '); do
    try -tls1_2 -cipher "$c:@SECLEVEL=0" | grep -q "^New, TLSv1.2, Cipher is $c\$" && printf ' %s' "$c"
done
printf '\ntls1.3 groups:'
for g in X25519 P-256 P-384 P-521 X448 ffdhe2048 ffdhe3072; do
    try -tls1_3 -groups "$g" | grep -q '^New, TLSv1.3' && printf ' %s' "$g"
done
printf '\ntls1.3, client offers P-256:X25519: '
try -tls1_3 -groups P-256:X25519 | sed -n 's/^Server Temp Key: //p'
printf 'tls1.2, client offers P-256:X25519: '
try -tls1_2 -groups P-256:X25519 | sed -n 's/^Server Temp Key: //p'
printf 'tls1.3, default client: '
try -tls1_3 | sed -n 's/^New, //p'
printf 'tls1.2, default client: '
try -tls1_2 | sed -n 's/^New, //p'
