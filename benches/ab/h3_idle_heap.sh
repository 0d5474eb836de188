#!/usr/bin/env bash
# What an idle HTTP/3 connection's memory is made of (docs/HTTP3.md "What an idle QUIC
# connection holds"): the proxy runs under heaptrack with the bench's h3 config (one worker),
# http-perf ramps N idle QUIC connections (the state the h3_idle_conn_bytes row measures:
# handshake done, SETTINGS exchanged, a PING every 10 s) and holds them; in the middle of the
# hold the proxy is killed (SIGKILL), so that what heaptrack counts as never freed is exactly
# what was live then. heap_owners.py sorts those bytes by owner (quinn-proto's connection
# and its parts, rustls, aws-lc keys, the proxy's structs, the h3 crate) and divides by N.
#
# Usage: benches/ab/h3_idle_heap.sh [N=1000]   (H3_HEAP_REQUEST=1: after one request each)
# Environment: BIN_DIR [target/release], H3_HEAP_PORT [25443], H3_HEAP_ORIGIN_PORT [25000], H3_HEAP_STATS_PORT [25001],
# H3_HEAP_KEEP [unset; 1: keep the work directory with the heaptrack file].
# Everything started here is stopped by pid on exit.
set -euo pipefail
trap 'echo "h3_idle_heap: failed (exit $?) at line $LINENO: $BASH_COMMAND" >&2' ERR

N=${1:-1000}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN_DIR=${BIN_DIR:-$ROOT/target/release}
PORT=${H3_HEAP_PORT:-25443}
ORIGIN_PORT=${H3_HEAP_ORIGIN_PORT:-25000}
STATS_PORT=${H3_HEAP_STATS_PORT:-25001}
HOST=tempesta-tech.com
command -v heaptrack >/dev/null || "$ROOT/etc/need-packages.sh" heaptrack
for b in proxy http-perf origin; do [[ -x $BIN_DIR/$b ]] || { echo "no $BIN_DIR/$b" >&2; exit 1; }; done

WORK=$(mktemp -d /tmp/h3heap.XXXXXX)
PIDS=()
cleanup() {
    local p
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    [[ ${H3_HEAP_KEEP:-} == 1 ]] && echo "kept $WORK" >&2 || rm -rf "$WORK"
}
trap cleanup EXIT

openssl req -x509 -nodes -days 2 -subj "/CN=$HOST" \
    -addext "subjectAltName=DNS:$HOST,DNS:localhost,IP:127.0.0.1" \
    -newkey ec -pkeyopt ec_paramgen_curve:P-256 \
    -keyout "$WORK/key.pem" -out "$WORK/cert.pem" >/dev/null 2>&1
# The bench's config (benches/ab/run.sh): etc/tempesta.conf on these ports, h3 on the TLS
# listener, no per-address connection limit, no access log, long idle timeouts.
sed -e "s|^listen 127\.0\.0\.1:8443 proto=\"\(.*\)\";|listen 127.0.0.1:$PORT proto=\"\1,h3\";|" \
    -e "s|^listen 127\.0\.0\.1:8080;||" \
    -e "s|server 127\.0\.0\.1:8000;|server 127.0.0.1:$ORIGIN_PORT;|" \
    -e "s|tls_certificate certs/tempesta\.crt;|tls_certificate $WORK/cert.pem;|" \
    -e "s|tls_certificate_key certs/tempesta\.key;|tls_certificate_key $WORK/key.pem;|" \
    -e "s|^frang_limits {|frang_limits {\n    concurrent_tcp_connections 0;|" \
    "$ROOT/etc/tempesta.conf" >"$WORK/proxy.conf"
printf '\naccess_log off;\nkeepalive_timeout 600;\nworker_threads 1;\nstats_listen 127.0.0.1:%s;\n' \
    "$STATS_PORT" >>"$WORK/proxy.conf"
"$BIN_DIR/proxy" -t -c "$WORK/proxy.conf" >"$WORK/check.log" 2>&1 ||
    { cat "$WORK/check.log" >&2; exit 1; }

"$BIN_DIR/origin" --listen "127.0.0.1:$ORIGIN_PORT" --size 10 \
    --cache-control "public, max-age=3600" -t 1 >"$WORK/origin.log" 2>&1 &
PIDS+=($!)
heaptrack -o "$WORK/heap" "$BIN_DIR/proxy" -c "$WORK/proxy.conf" >"$WORK/proxy.log" 2>&1 &
PIDS+=($!)
PROXY=
for _ in $(seq 1 300); do
    PROXY=$(pgrep -f -n "^$BIN_DIR/proxy -c $WORK/proxy.conf" || true)
    [[ -n $PROXY ]] && (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && break
    sleep 0.1
done
[[ -n $PROXY ]] || { cat "$WORK/proxy.log" >&2; exit 1; }
PIDS+=("$PROXY")
sleep 1

# Hold long enough to kill the proxy in the middle of the idle hold; with H3_HEAP_REQUEST=1,
# a short hold, then rounds of one request on every connection: http-perf is stopped
# (SIGSTOP, so that it closes nothing) once the proxy has answered the first round, and
# the proxy is killed 2 s later (a few connections may have their second request by then).
HOLD_SECS=600 ROUNDS=1 RAMP_LIMIT=600s
[[ ${H3_HEAP_REQUEST:-} == 1 ]] && HOLD_SECS=1 ROUNDS=2 RAMP_LIMIT=30s
# Under heaptrack a handshake takes several times longer: 60 s before one counts as failed.
"$BIN_DIR/http-perf" --json --h3 --hold "$N" --hold-secs "$HOLD_SECS" --rounds "$ROUNDS" -t 1 \
    --ramp-limit "$RAMP_LIMIT" --handshake-timeout 60s --connect "127.0.0.1:$PORT" "https://$HOST/" >"$WORK/perf.json" 2>&1 &
PERF=$!
PIDS+=("$PERF")
metric() {
    curl -s "http://127.0.0.1:$STATS_PORT/metrics" |
        awk -v m="$1" 'index($0, m) == 1 {n += $NF} END {print n + 0}'
}
# The ramp is over when the proxy counts N handshakes done, and http-perf's probe's (it
# sends its Finished before closing); then a few seconds of the idle hold (its PINGs).
done_handshakes() { metric 'ktls_proxy_quic_handshakes_total{state="done"}'; }
for _ in $(seq 1 600); do
    [[ $(done_handshakes) -gt "$N" ]] && break
    kill -0 "$PERF" 2>/dev/null || { cat "$WORK/perf.json" >&2; exit 1; }
    sleep 1
done
[[ $(done_handshakes) -gt "$N" ]] || { echo "the ramp did not end" >&2; exit 1; }
if [[ ${H3_HEAP_REQUEST:-} == 1 ]]; then
    # http-perf's probe and one request per connection.
    for _ in $(seq 1 6000); do
        [[ $(metric ktls_proxy_requests_total) -ge $((N + 1)) ]] && break
        sleep 0.05
    done
    kill -STOP "$PERF"
    sleep 2
else
    sleep 5
fi
kill -KILL "$PROXY"
kill -KILL "$PERF" 2>/dev/null || true
# heaptrack's interpreter finishes writing once the proxy is gone.
wait "${PIDS[1]}" 2>/dev/null || true
file=$(ls "$WORK"/heap.* | head -1)
heaptrack_print -f "$file" --flamegraph-cost-type leaked -F "$WORK/live.txt" >/dev/null
python3 "$ROOT/benches/ab/heap_owners.py" "$WORK/live.txt" "$N"
