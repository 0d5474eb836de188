#!/usr/bin/env bash
# Sets up and runs the proxy on the bundled defaults: builds the release binaries, generates
# the certificate, starts the bundled origin on 127.0.0.1:8000 (a 26 KB page, cacheable) and
# `proxy -c etc/tempesta.conf` (HTTPS on 127.0.0.1:8443, HTTP on 127.0.0.1:8080).
# Stop with Ctrl-C: both processes are stopped by pid.
set -euo pipefail
cd "$(dirname "$0")"

# cmake and libclang build AWS-LC, the default TLS library (aws-lc-sys); openssl makes the
# certificate.
etc/need-packages.sh cmake clang libclang-dev openssl

cargo build --release --quiet -p proxy -p tls-perf
etc/gen-cert.sh
target/release/proxy -t -c etc/tempesta.conf

pids=()
stop() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
}
trap stop EXIT INT TERM

target/release/origin --listen 127.0.0.1:8000 --size 26000 --cache-control "max-age=60" &
pids+=($!)
target/release/proxy -c etc/tempesta.conf &
pids+=($!)

cat <<'MSG'

The proxy is up. Try (the certificate is self-signed, hence -k; the site's name is routed,
other Host values get 403 as in the reference configuration):

  curl -k --resolve tempesta-tech.com:8443:127.0.0.1 https://tempesta-tech.com:8443/
  curl -k --resolve tempesta-tech.com:8443:127.0.0.1 -I https://tempesta-tech.com:8443/blog
  curl -H 'Host: tempesta-tech.com' http://127.0.0.1:8080/

Ctrl-C stops the proxy and the origin.
MSG
wait -n "${pids[@]}"
