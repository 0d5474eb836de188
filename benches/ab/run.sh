#!/usr/bin/env bash
# The nginx A/B comparison: the proxy against nginx on the same machine, the
# same certificate, the same TLS parameters and the same client tools.
#
#   benches/ab/run.sh                      # every row, 3 runs of 10 s each (~30-50 min)
#   benches/ab/run.sh --quick              # every row, 1 run of 5 s each (~10 min)
#   benches/ab/run.sh --only keepalive_10b_rps close_10b_rps
#   benches/ab/run.sh --servers haproxy trafficserver --quick   # a subset of the servers
#   benches/ab/run.sh --latency            # every row plus the fixed-rate latency rows
#   benches/ab/run.sh --quick --only latency_keepalive_10b_at50 latency_h2_10b_at80
#   benches/ab/run.sh --quick --only h3_10b_rps latency_h3_10b_at50 latency_h3_10b_at80 --servers proxy caddy
#
# Servers (one at a time, pinned to core 1 with 1 worker each, access logs off):
#   proxy         target/release/proxy with etc/tempesta.conf's rules and `cache 1`
#                 in front of the origin (the file copied with only the addresses
#                 and certificate paths replaced, plus the bench overrides below)
#   nginx_static  nginx serving the pages from files over TLS (etc/nginx-static.conf)
#   nginx_cache   nginx as a TLS reverse proxy with proxy_cache in front of the
#                 same origin (etc/nginx-cache.conf)
#   haproxy       HAProxy (Debian's 2.6) with TLS and h2 on the frontend and its RAM
#                 cache in front of the same origin, nbthread 1 (etc/haproxy-cache.cfg)
#   trafficserver Apache Traffic Server (Debian's 9.2) with TLS (and h2) and its cache
#                 in front of the same origin, one net thread, started without
#                 traffic_manager (etc/trafficserver/, copied into the run's directory)
#   caddy         Caddy (Debian's 2.6) serving the pages from files over TLS, h2 and h3
#                 (UDP), GOMAXPROCS=1 (etc/caddy/Caddyfile, static mode)
#   caddy_proxy   the same Caddy as a reverse proxy to the origin: it has no cache, so
#                 every request goes to the origin (not in the default rotation; --servers)
# A peer that is not installed is reported and skipped (install them with
# etc/need-packages.sh haproxy trafficserver caddy); the overrides each server needs are
# listed under "Peers" in docs/PERFORMANCE.md. For the two peers every row also checks,
# after the warm-up, that a repeated request is a cache hit (an Age header of 1 s or more).
# The origin (target/release/origin, 10-byte body on `/`, 26 KiB on
# /bytes/26624, Cache-Control: public, max-age=3600) and the clients run on core 0.
#
# Each row runs on a freshly started server, after a 1 s warm-up per page (which
# fills the caches) and a check that both pages answer 200 with the whole body.
# Rows: handshakes_full_tls12 handshakes_full_tls13 handshakes_resumed_tls13
#       (tls-perf -l 100 -t 1), keepalive_10b_rps keepalive_26k_rps
#       close_10b_rps close_26k_rps (http-perf -c 100 -t 1), h2_10b_rps h2_26k_rps
#       (h2load -c 10 -m 100 -t 1 over TLS with ALPN h2, as tempesta-test runs it;
#       nginx listens with `http2`), h2_1024c_rps (h2load -c 1024 -m 1 -t 1 -n DUR*10000:
#       the seed write-up's many-connection shape, 10 B page, handshakes included),
#       h3_10b_rps h3_26k_rps (http-perf --h3 -c 10 --pipeline 100 -t 1: h2_10b_rps's
#       shape over QUIC; only for the servers that speak HTTP/3 here: proxy, with a copy of
#       its config whose TLS listener adds h3 (`proto="h2,https,h3"`, for these rows only, so
#       that the other rows' responses carry no Alt-Svc), caddy and caddy_proxy (their
#       Caddyfile serves h3 on UDP in every row); Debian's nginx 1.22 (no http_v3 module),
#       HAProxy 2.6 (built -QUIC) and Traffic Server 9.2 (TS_USE_QUIC 0) skip them, said
#       so in the output and shown as – in the table), idle_tls_conn_bytes
#       (http-perf --hold 10000 --server-pid, on a freshly started server: the server's
#       RSS growth over http-perf's baseline, sampled every 0.2 s by abstat.py and taken
#       while the server is idle with every connection open, divided by the connections),
#       h3_idle_conn_bytes (the same with http-perf --hold --h3: idle QUIC connections, each
#       from its own UDP socket; a handshake not done within 10 s counts as failed, so the
#       ramp goes on; the h3 servers only, as the h3_* rows above).
# Latency rows (with --latency, or named in --only): latency_keepalive_10b_at50/_at80 and
#       latency_h2_10b_at50/_at80: http-perf --rate at 50 % / 80 % of nginx's median maximum
#       in keepalive_10b_rps / h2_10b_rps of this run (measured first on nginx_static if the
#       run has none), keep-alive -c 100 or --h2 -c 10 --pipeline 100; p50/p99/p99.9 from
#       each request's intended send time (coordinated omission corrected); value: p99.
#       latency_h3_10b_at50/_at80: the same over HTTP/3 (--h3 -c 10 --pipeline 100, the
#       h3_10b_rps shape) at 50 % / 80 % of Caddy's median maximum in h3_10b_rps of this run
#       (nginx 1.22 has no HTTP/3; measured first on caddy if the run has none; caddy must
#       be among the servers), on the h3 servers only.
# Bench overrides, the same for every server: idle timeouts of 600 s (proxy
# keepalive_timeout, nginx keepalive_timeout and client_header_timeout), above the idle
# row's ramp (up to 240 s) plus its hold.
# Each row is the median of the runs (3, or 1 with --quick) with min..max. The
# servers run back to back for each row, in a rotating order.
#
# Output: a Markdown table on stdout, benches/ab/results/latest.json and
# latest.svg (not replaced by --only or --servers runs), and every raw run and server log in
# benches/ab/results/run-*/ (git-ignored).
#
# AB_PROXY_OPENSSL=1 adds a fourth server, proxy_openssl: the same proxy and config
# with `tls_ktls off;` (OpenSSL's record layer for the life of each connection), in
# the same rotation, and a second table: the proxy's record layer vs OpenSSL's.
#
# Environment: AB_PORT [24443] (TLS), AB_PLAIN_PORT [24080] (the proxy's plain
# listener), AB_ORIGIN_PORT [24000], AB_DURATION [10, quick 5] seconds per run,
# AB_RUNS [3, quick 1], AB_HOLD [10000] connections, BIN_DIR [target/release],
# AB_SYSCALLS [unset; 1: count the server's syscalls by kind during every run with
# `perf stat` (syscall tracepoints) and print syscalls per request per row and server; the
# counting costs the server a little CPU, so use it apart from the CPU rows],
# AB_PERF [unset; 1: `perf record -g` the server during every run, into the run
# directory, for diagnosis only: the profiler's cost lands in the numbers].
#
# Everything started here is stopped by pid on exit, the client running then too (a
# `timeout` or SIGTERM of the script stops it at once). The script refuses to run
# if a port it needs already answers (or if another process joins a port with
# SO_REUSEPORT later), and stops at once (exit 1, with the log) if a server does
# not start or dies. A run with errors (tls-perf errors, http-perf socket errors
# or non-2xx/3xx responses, a response of the wrong size, a failed hold) is
# reported as PROBLEM, left out of the medians, and makes the script exit 1 after
# it has written the results.
set -euo pipefail
# A command failing under set -e says where, instead of a silent exit 1.
trap 'echo "ab: failed (exit $?) at line $LINENO: $BASH_COMMAND" >&2' ERR

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
HERE="$ROOT/benches/ab"
# peer_missing, peer_is_cache, configure_peers, start_peer
# shellcheck source=benches/ab/peers.sh
source "$HERE/peers.sh"
BIN_DIR=${BIN_DIR:-${CARGO_TARGET_DIR:-$ROOT/target}/release}
BASE_ROWS=(handshakes_full_tls12 handshakes_full_tls13 handshakes_resumed_tls13
           keepalive_10b_rps keepalive_26k_rps close_10b_rps close_26k_rps
           h2_10b_rps h2_26k_rps h2_1024c_rps h3_10b_rps h3_26k_rps idle_tls_conn_bytes
           h3_idle_conn_bytes)
# --latency: at 50 % and 80 % of nginx's maximum in keepalive_10b_rps / h2_10b_rps.
LATENCY_ROWS=(latency_keepalive_10b_at50 latency_keepalive_10b_at80
              latency_h2_10b_at50 latency_h2_10b_at80 latency_h3_10b_at50 latency_h3_10b_at80)
ALL_ROWS=("${BASE_ROWS[@]}" "${LATENCY_ROWS[@]}")
# The servers that serve HTTP/3 (the h3_* and latency_h3_* rows); the others skip those rows.
H3_SERVERS=(proxy caddy caddy_proxy)
h3_row_name() { [[ $1 == h3_* || $1 == latency_h3_* ]]; }
KNOWN_SERVERS=(proxy nginx_static nginx_cache haproxy trafficserver caddy caddy_proxy proxy_openssl)
# caddy_proxy (Caddy proxying every request to the origin: it has no cache) only on request.
SERVERS=(proxy nginx_static nginx_cache haproxy trafficserver caddy)
[[ ${AB_PROXY_OPENSSL:-0} == 1 ]] && SERVERS+=(proxy_openssl)
HOST=tempesta-tech.com
BIG=26624           # the "26 KB" page: 26 KiB
CLIENT_CPU=0
SERVER_CPU=1
# One core for the server, so one worker: nginx worker_processes 1, and the proxy's
# default (worker_threads auto = the CPUs it may run on) picks 1 under taskset.
WORKERS=1

die() { echo "ab: $*" >&2; exit 1; }
usage() { awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; }

QUICK=0
LATENCY=0
ONLY=()
PICK=()
while [[ $# -gt 0 ]]; do
    case $1 in
        --quick) QUICK=1 ;;
        --latency) LATENCY=1 ;;
        --only) shift
                while [[ $# -gt 0 && $1 != --* ]]; do ONLY+=("$1"); shift; done
                [[ ${#ONLY[@]} -gt 0 ]] || die "--only needs row names: ${ALL_ROWS[*]}"
                continue ;;
        --servers) shift
                while [[ $# -gt 0 && $1 != --* ]]; do PICK+=("$1"); shift; done
                [[ ${#PICK[@]} -gt 0 ]] || die "--servers needs server names: ${KNOWN_SERVERS[*]}"
                continue ;;
        -h|--help) usage; exit 0 ;;
        *) usage >&2; die "unknown argument '$1'" ;;
    esac
    shift
done
ROWS=("${BASE_ROWS[@]}")
[[ $LATENCY == 1 ]] && ROWS+=("${LATENCY_ROWS[@]}")
if [[ ${#ONLY[@]} -gt 0 ]]; then
    for r in "${ONLY[@]}"; do
        [[ " ${ALL_ROWS[*]} " == *" $r "* ]] || die "unknown row '$r'; rows: ${ALL_ROWS[*]}"
    done
    ROWS=("${ONLY[@]}")
fi
if [[ ${#PICK[@]} -gt 0 ]]; then
    for s in "${PICK[@]}"; do
        [[ " ${KNOWN_SERVERS[*]} " == *" $s "* ]] || die "unknown server '$s'; servers: ${KNOWN_SERVERS[*]}"
    done
    SERVERS=("${PICK[@]}")
fi
if [[ $QUICK == 1 ]]; then RUNS=${AB_RUNS:-1}; DUR=${AB_DURATION:-5}; MODE=quick
else RUNS=${AB_RUNS:-3}; DUR=${AB_DURATION:-10}; MODE=full; fi
PORT=${AB_PORT:-24443}
PLAIN_PORT=${AB_PLAIN_PORT:-24080}
ORIGIN_PORT=${AB_ORIGIN_PORT:-24000}
HOLD=${AB_HOLD:-10000}
COMMAND="$( (env | grep -E '^AB_[A-Z_]+=' || true) | sort | tr '\n' ' ')benches/ab/run.sh"
[[ $QUICK == 1 ]] && COMMAND+=" --quick"
[[ $LATENCY == 1 ]] && COMMAND+=" --latency"
[[ ${#ONLY[@]} -gt 0 ]] && COMMAND+=" --only ${ONLY[*]}"
[[ ${#PICK[@]} -gt 0 ]] && COMMAND+=" --servers ${PICK[*]}"
[[ $(nproc) -ge 2 ]] || die "needs 2 cores (client on core $CLIENT_CPU, servers on core $SERVER_CPU)"

# --- binaries and nginx -------------------------------------------------------
# Always measure the current sources (a no-op when the binaries are up to date), unless
# BIN_DIR points elsewhere on purpose.
if [[ $BIN_DIR == "$ROOT/target/release" ]]; then
    (cd "$ROOT" && cargo build --release --quiet -p proxy -p tls-perf) || die "cargo build failed"
fi
for b in proxy tls-perf http-perf origin; do [[ -x $BIN_DIR/$b ]] || die "no $BIN_DIR/$b"; done
HTTP_PERF_HELP=$("$BIN_DIR/http-perf" --help) || die "$BIN_DIR/http-perf --help failed"
for opt in --connect --hold --server-pid --json --rate --h2 --h3; do
    [[ $HTTP_PERF_HELP == *"$opt"* ]] || die "http-perf has no $opt"
done

if ! command -v nginx >/dev/null 2>&1; then
    [[ $(id -u) == 0 ]] || die "nginx is not installed; run as root (apt-get install nginx) or install it"
    echo "ab: installing nginx (apt-get)" >&2
    # Keep the package's service from starting (policy-rc.d), and stop it should
    # it start anyway: only this script's own instances may run.
    made_policy=0
    if [[ ! -e /usr/sbin/policy-rc.d ]]; then
        printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d && made_policy=1
    fi
    set +e
    (apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q nginx) >&2
    rc=$?
    set -e
    [[ $made_policy == 1 ]] && rm -f /usr/sbin/policy-rc.d
    [[ $rc == 0 ]] || die "apt-get install nginx failed"
    if [[ -s /run/nginx.pid ]] && kill -0 "$(cat /run/nginx.pid)" 2>/dev/null; then
        service nginx stop >&2 2>/dev/null || kill -QUIT "$(cat /run/nginx.pid)" || true
    fi
fi
command -v taskset >/dev/null || die "taskset (util-linux) missing"
# The peers are optional: one that is not installed is left out of the run, and said so.
SKIPPED=()
KEEP=()
for s in "${SERVERS[@]}"; do
    miss=$(peer_missing "$s")
    if [[ -n $miss ]]; then
        echo "ab: $s skipped: $miss is not installed (etc/need-packages.sh haproxy trafficserver caddy)" >&2
        SKIPPED+=("$s")
    else
        KEEP+=("$s")
    fi
done
[[ ${#KEEP[@]} -gt 0 ]] || die "no server left to measure"
SERVERS=("${KEEP[@]}")
command -v python3 >/dev/null || die "python3 missing"

# --- cleanup: everything we started, by pid -----------------------------------
WORK=$(mktemp -d /tmp/ab.XXXXXX)
chmod 755 "$WORK"    # nginx workers (user nobody) read the pages and write the cache
STAMP=$(date -u +%Y%m%d-%H%M%S)
OUT="$HERE/results/run-$STAMP"
mkdir -p "$OUT"
PIDS=()
SERVER_PID=
# The client command running now (abstat.py measure, or a warm-up's http-perf), if any.
CLIENT_PID=
# tree, stop_pids
source "$ROOT/benches/lib/procs.sh"
cleanup() {
    set +e
    # The client first: abstat.py kills its client's process group on TERM (`timeout`
    # puts the client in a group of its own, which a signal to ours does not reach).
    [[ -n $CLIENT_PID ]] && stop_pids "$CLIENT_PID"
    [[ -n $SERVER_PID ]] && stop_pids "$SERVER_PID"
    [[ ${#PIDS[@]} -gt 0 ]] && stop_pids "${PIDS[@]}"
    # Keep the server logs with the raw results.
    for f in "$WORK"/*.log "$WORK"/*/error.log "$WORK"/proxy.conf "$WORK"/proxy_h3.conf "$WORK"/*/nginx.conf \
             "$WORK"/haproxy/haproxy.cfg "$WORK"/caddy*/Caddyfile; do
        [[ -f $f ]] && cp "$f" "$OUT/$(basename "$(dirname "$f")")-$(basename "$f")" 2>/dev/null
    done
    for f in log/diags.log etc/records.config etc/remap.config; do
        [[ -f $WORK/trafficserver/$f ]] && cp "$WORK/trafficserver/$f" "$OUT/trafficserver-$(basename "$f")"
    done
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# client CMD...: runs a client command in the background and waits for it, its pid in
# CLIENT_PID meanwhile. Bash acts on a trapped signal only once the foreground command has
# ended, so a `timeout` or kill of this script would otherwise wait for the client's own
# limit (400 s for a hold) and leave it running; `wait` returns at once.
client() {
    local rc=0
    "$@" &
    CLIENT_PID=$!
    wait "$CLIENT_PID" || rc=$?
    CLIENT_PID=
    return "$rc"
}

answers() { (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; }
for p in "$PORT" "$PLAIN_PORT" "$ORIGIN_PORT"; do
    answers 127.0.0.1 "$p" && die "something already answers on 127.0.0.1:$p; stop it or set AB_PORT / AB_PLAIN_PORT / AB_ORIGIN_PORT"
done
# Caddy also takes UDP $PORT (HTTP/3); a socket left there by an earlier instance would
# share it (SO_REUSEPORT) or keep Caddy from starting.
if command -v ss >/dev/null && [[ -n $(ss -lunH "sport = :$PORT") ]]; then
    die "something already holds UDP 127.0.0.1:$PORT: $(ss -lunpH "sport = :$PORT" | head -1)"
fi

# Every listener on the port must belong to process tree $2: with SO_REUSEPORT
# (the proxy, origin and these nginx configs use it) another program binding the
# same port later would silently take part of the connections.
check_port_owner() {
    local port=$1 pid=$2 mine p
    command -v ss >/dev/null || return 0
    mine=" $(tree "$pid" | tr '\n' ' ') "
    for p in $(ss -ltnpH "sport = :$port" | grep -o 'pid=[0-9]*' | cut -d= -f2 | sort -u); do
        [[ $mine == *" $p "* ]] ||
            die "another process also listens on 127.0.0.1:$port (pid $p: $(ps -o args= -p "$p" | cut -c1-80)); results would mix two servers"
    done
}

wait_listening() {
    local pid=$1 port=$2 name=$3 log=$4 i
    for i in $(seq 1 300); do
        if ! kill -0 "$pid" 2>/dev/null; then
            echo "ab: $name exited before listening on 127.0.0.1:$port; its log:" >&2
            cat "$log" >&2 || true
            exit 1
        fi
        answers 127.0.0.1 "$port" && return 0
        sleep 0.1
    done
    echo "ab: $name did not listen on 127.0.0.1:$port within 30 s; its log:" >&2
    cat "$log" >&2 || true
    exit 1
}

# --- certificate, pages, configs ------------------------------------------------
openssl req -x509 -nodes -days 2 -subj "/CN=$HOST" \
    -addext "subjectAltName=DNS:$HOST,DNS:localhost,IP:127.0.0.1" \
    -newkey ec -pkeyopt ec_paramgen_curve:P-256 \
    -keyout "$WORK/key.pem" -out "$WORK/cert.pem" >/dev/null 2>&1 ||
    die "openssl could not make the certificate"

mkdir -p "$WORK/www/bytes"
printf '0123456789' >"$WORK/www/index"
head -c "$BIG" /dev/zero | tr '\0' 'x' >"$WORK/www/bytes/$BIG"
chmod -R a+rX "$WORK/www"

# The proxy: etc/tempesta.conf with the addresses and certificate paths replaced.
# Bench overrides, appended to frang_limits / the file (and stated in the report):
# concurrent_tcp_connections 0 (the default of 1000 per client address would
# refuse the idle-memory row's 10000 loopback connections) and access_log off.
sed -e "s|^listen 127\.0\.0\.1:8443 \(proto=.*\);|listen 127.0.0.1:$PORT \1;|" \
    -e "s|^listen 127\.0\.0\.1:8080;|listen 127.0.0.1:$PLAIN_PORT;|" \
    -e "s|server 127\.0\.0\.1:8000;|server 127.0.0.1:$ORIGIN_PORT;|" \
    -e "s|tls_certificate certs/tempesta\.crt;|tls_certificate $WORK/cert.pem;|" \
    -e "s|tls_certificate_key certs/tempesta\.key;|tls_certificate_key $WORK/key.pem;|" \
    -e "s|^frang_limits {|frang_limits {\n    concurrent_tcp_connections 0;  # bench override|" \
    "$ROOT/etc/tempesta.conf" >"$WORK/proxy.conf"
# keepalive_timeout 600: the idle row's connections wait for the whole ramp (up to
# --ramp-limit 240 s on a busy machine) plus the hold; at the default 75 s the first ones
# were closed as idle before the hold ended (the row's "dropped" connections, nginx too).
printf '\n# bench overrides\naccess_log off;\nkeepalive_timeout 600;\n' >>"$WORK/proxy.conf"
for want in "keepalive_timeout 600;" "listen 127.0.0.1:$PORT proto=" "listen 127.0.0.1:$PLAIN_PORT;" \
            "server 127.0.0.1:$ORIGIN_PORT;" "tls_certificate $WORK/cert.pem;" \
            "tls_certificate_key $WORK/key.pem;" "concurrent_tcp_connections 0;" "cache 1;"; do
    grep -qF "$want" "$WORK/proxy.conf" ||
        die "etc/tempesta.conf changed shape: could not make '$want' in the bench config"
done
{ cat "$WORK/proxy.conf"; printf '\n# the OpenSSL record layer comparison\ntls_ktls off;\n'; } \
    >"$WORK/proxy_openssl.conf"
# The h3_* rows: the same config with QUIC (HTTP/3) on the TLS listener's address too.
sed -e "s|^listen 127\.0\.0\.1:$PORT proto=\"\(.*\)\";|listen 127.0.0.1:$PORT proto=\"\1,h3\";|" \
    "$WORK/proxy.conf" >"$WORK/proxy_h3.conf"
grep -qE "^listen 127\.0\.0\.1:$PORT proto=\".*,h3\";" "$WORK/proxy_h3.conf" ||
    die "etc/tempesta.conf changed shape: could not add h3 to the TLS listener (proto=\"...\")"
"$BIN_DIR/proxy" -t -c "$WORK/proxy_h3.conf" >"$WORK/proxy-check.log" 2>&1 ||
    { cat "$WORK/proxy-check.log" >&2; die "the bench proxy config with h3 does not load"; }
"$BIN_DIR/proxy" -t -c "$WORK/proxy.conf" >"$WORK/proxy-check.log" 2>&1 ||
    { cat "$WORK/proxy-check.log" >&2; die "the bench proxy config does not load"; }

NGINX_USER="nobody nogroup"
getent group nogroup >/dev/null || NGINX_USER=nobody
for s in nginx_static nginx_cache; do
    d="$WORK/$s"
    mkdir -p "$d/tmp"
    tpl="$ROOT/etc/nginx-${s#nginx_}.conf"
    sed -e "s|@WORKERS@|$WORKERS|g" -e "s|@PREFIX@|$d|g" -e "s|@ADDR@|127.0.0.1:$PORT|g" \
        -e "s|@ROOT@|$WORK/www|g" -e "s|@ORIGIN@|127.0.0.1:$ORIGIN_PORT|g" \
        -e "s|@CERT@|$WORK/cert.pem|g" -e "s|@KEY@|$WORK/key.pem|g" \
        -e "s|@USER@|$NGINX_USER|g" \
        -e "s|^\( *\)keepalive_timeout 75;|\1keepalive_timeout 600s;  # bench override\n\1client_header_timeout 600s;  # bench override|" \
        "$tpl" >"$d/nginx.conf"
    # The same idle timeouts as the proxy's override above (nginx closes a connection that
    # sent no request after client_header_timeout, 60 s by default).
    grep -q "client_header_timeout 600s;" "$d/nginx.conf" || die "$tpl changed shape: no keepalive_timeout 75 to override"
    ! grep -v '^ *#' "$d/nginx.conf" | grep -q '@[A-Z]*@' || die "unfilled placeholder in $tpl"
    nginx -t -q -p "$d/" -c "$d/nginx.conf" -e "$d/error.log" 2>"$d/check.log" ||
        { cat "$d/check.log" >&2; die "the $s config does not load"; }
done

configure_peers "${SERVERS[@]}"

# --- origin -------------------------------------------------------------------
taskset -c "$CLIENT_CPU" "$BIN_DIR/origin" --listen "127.0.0.1:$ORIGIN_PORT" --size 10 \
    --cache-control "public, max-age=3600" -t 1 >"$WORK/origin.log" 2>&1 &
PIDS+=($!)
wait_listening "${PIDS[-1]}" "$ORIGIN_PORT" origin "$WORK/origin.log"

# --- machine --------------------------------------------------------------------
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
MACHINE=$(python3 "$HERE/abstat.py" machine --root "$ROOT" --load "$LOAD_START" \
    --mode "$MODE, ${DUR}s per run" --runs "$RUNS" --command "$COMMAND" \
    --placement "client tools and origin pinned to core $CLIENT_CPU; each server pinned to core $SERVER_CPU with $WORKERS worker (one core: nginx worker_processes 1, proxy worker_threads auto = 1 under taskset, haproxy nbthread 1, traffic_server exec_thread.limit 1, caddy GOMAXPROCS=1); servers: ${SERVERS[*]}" \
    --client "tls-perf -l 100 -t 1 -T $DUR; http-perf -c 100 -t 1 -d ${DUR}s; http-perf --h3 -c 10 --pipeline 100 -t 1 -d ${DUR}s; http-perf --hold $HOLD -t 1")
echo "$MACHINE" >"$OUT/machine.json"
echo "ab: $MODE run, $RUNS run(s) per row, rows: ${ROWS[*]}" >&2
echo "ab: load average at start: $LOAD_START (2 cores; above ~0.5 the numbers are disturbed by other work)" >&2
echo "ab: raw results in $OUT" >&2

# --- servers --------------------------------------------------------------------
start_server() {
    local s=$1
    case $s in
        proxy|proxy_openssl)
            local conf="$WORK/$s.conf"
            h3_row_name "$ROW" && conf="$WORK/${s}_h3.conf"
            taskset -c "$SERVER_CPU" "$BIN_DIR/proxy" -c "$conf" >"$WORK/$s.log" 2>&1 &
            SERVER_PID=$!
            wait_listening "$SERVER_PID" "$PORT" "$s" "$WORK/$s.log" ;;
        nginx_*)
            local d="$WORK/$s"
            taskset -c "$SERVER_CPU" nginx -p "$d/" -c "$d/nginx.conf" -e "$d/error.log" \
                >"$d/stdout.log" 2>&1 &
            SERVER_PID=$!
            wait_listening "$SERVER_PID" "$PORT" "$s" "$d/error.log" ;;
        *) start_peer "$s" ;;
    esac
    sleep 1    # let the workers settle before anything is measured
}
stop_server() {
    [[ -n $SERVER_PID ]] && stop_pids "$SERVER_PID"
    SERVER_PID=
    # The next server must not find this one's listener.
    local i
    for i in $(seq 1 50); do answers 127.0.0.1 "$PORT" || return 0; sleep 0.1; done
    die "the port $PORT still answers after the server was stopped"
}

RESULTS="$OUT/results.jsonl"
# AB_SYSCALLS: every syscall, and the ones a request's path makes, by name.
SYSCALL_EVENTS=raw_syscalls:sys_enter
for sc in read readv recvfrom recvmsg write writev sendto sendmsg sendfile64 epoll_wait \
          epoll_ctl setsockopt getsockopt accept4 close openat newfstatat fstat futex; do
    [[ -d /sys/kernel/tracing/events/syscalls/sys_enter_$sc ]] &&
        SYSCALL_EVENTS+=",syscalls:sys_enter_$sc"
done
: >"$RESULTS"
FAILED=0
URL_10B="https://$HOST/"
URL_BIG="https://$HOST/bytes/$BIG"

# measure SERVER ROW REP TOOL BODY [extra meta] -- CMD...
measure() {
    local server=$1 row=$2 rep=$3 tool=$4 body=$5 extra=$6
    shift 6
    [[ $1 == -- ]] && shift
    check_port_owner "$PORT" "$SERVER_PID"
    check_port_owner "$ORIGIN_PORT" "${PIDS[0]}"
    local meta="{\"server\":\"$server\",\"row\":\"$row\",\"rep\":$rep,\"tool\":\"$tool\",\"body_bytes\":$body$extra}"
    # A run with errors is recorded (and left out of the medians), the other runs go
    # on, and the script exits 1 at the end; a server that died stops everything.
    local perf_pid=
    if [[ -n ${AB_PERF:-} ]]; then   # diagnosis only: profiling costs the server CPU
        perf record -g -F 499 -o "$OUT/perf-$server-$row-$rep.data" \
            -p "$(tree "$SERVER_PID" | paste -sd,)" >/dev/null 2>"$OUT/perf-$server-$row-$rep.err" &
        perf_pid=$!
        PIDS+=("$perf_pid")
        sleep 0.5
    fi
    local stat_pid=
    if [[ ${AB_SYSCALLS:-0} == 1 ]]; then
        perf stat -x, -e "$SYSCALL_EVENTS" -p "$(tree "$SERVER_PID" | paste -sd,)" \
            -o "$OUT/syscalls-$server-$row-$rep.csv" >/dev/null 2>&1 &
        stat_pid=$!
        PIDS+=("$stat_pid")
        sleep 0.3
    fi
    client python3 "$HERE/abstat.py" measure --pid "$SERVER_PID" --out "$RESULTS" --meta "$meta" -- "$@" ||
        FAILED=$((FAILED + 1))
    if [[ -n $stat_pid ]]; then kill -INT "$stat_pid" 2>/dev/null; wait "$stat_pid" 2>/dev/null || true; fi
    if [[ -n $perf_pid ]]; then kill -INT "$perf_pid" 2>/dev/null; wait "$perf_pid" 2>/dev/null || true; fi
    kill -0 "$SERVER_PID" 2>/dev/null || { echo "ab: $server died during $row" >&2; return 1; }
}

tls_row() {   # server row rep tls-perf-options...
    local server=$1 row=$2 rep=$3 extra=""
    shift 3
    [[ " $* " == *" --tickets on "* ]] && extra=',"resumed_expected":true'
    measure "$server" "$row" "$rep" tls-perf 0 "$extra" -- \
        timeout -s KILL $((DUR + 40)) taskset -c "$CLIENT_CPU" "$BIN_DIR/tls-perf" --json -q \
        -l 100 -t 1 -T "$DUR" --sni "$HOST" --server-pid "$SERVER_PID" "$@" 127.0.0.1 "$PORT"
}
http_row() {  # server row rep body response-bytes url [http-perf options...]
    local server=$1 row=$2 rep=$3 body=$4 resp=$5 url=$6
    shift 6
    measure "$server" "$row" "$rep" http-perf "$body" ",\"resp_bytes\":$resp" -- \
        timeout -s KILL $((DUR + 40)) taskset -c "$CLIENT_CPU" "$BIN_DIR/http-perf" --json \
        -c 100 -t 1 -d "${DUR}s" --timeout 5s --connect "127.0.0.1:$PORT" \
        --server-pid "$SERVER_PID" "$@" "$url"
}
h2_row() {    # server row rep body url [h2load shape...]: by default as tempesta-test runs it
    local server=$1 row=$2 rep=$3 body=$4 url=$5
    shift 5
    local shape=("$@")
    [[ ${#shape[@]} -gt 0 ]] || shape=(-c 10 -m 100 -D "$DUR" --warm-up-time=1)
    measure "$server" "$row" "$rep" h2load "$body" "" -- \
        timeout -s KILL $((DUR + 100)) taskset -c "$CLIENT_CPU" h2load -t 1 "${shape[@]}" \
        --connect-to="127.0.0.1:$PORT" "$url"
}
# The fixed-rate latency rows: http-perf --rate (latency from each request's intended send
# time), the 10-byte page, keep-alive with 100 connections, or h2 or h3 with 10 connections
# of up to 100 streams (h2_10b_rps's and h3_10b_rps's shape).
latency_row() {   # server row rep rate
    local server=$1 row=$2 rep=$3 rate=$4 shape=(-c 100) h2=false h3=false
    [[ $row == latency_h2_* ]] && { shape=(--h2 -c 10 --pipeline 100); h2=true; }
    [[ $row == latency_h3_* ]] && { shape=(--h3 -c 10 --pipeline 100); h3=true; }
    measure "$server" "$row" "$rep" http-perf 10 ",\"resp_bytes\":$RESP_10B,\"rate\":$rate,\"h2\":$h2,\"h3\":$h3" -- \
        timeout -s KILL $((DUR + 40)) taskset -c "$CLIENT_CPU" "$BIN_DIR/http-perf" --json \
        -t 1 -d "${DUR}s" --timeout 5s --rate "$rate" --connect "127.0.0.1:$PORT" \
        --server-pid "$SERVER_PID" "${shape[@]}" "$URL_10B"
}
# The HTTP/3 rows: http-perf's own QUIC client, h2_10b_rps's shape (10 connections of up to
# 100 streams); abstat.py checks that every response's body was the whole page.
h3_row() {    # server row rep body url
    local server=$1 row=$2 rep=$3 body=$4 url=$5
    measure "$server" "$row" "$rep" http-perf "$body" ',"h3":true' -- \
        timeout -s KILL $((DUR + 40)) taskset -c "$CLIENT_CPU" "$BIN_DIR/http-perf" --json --h3 \
        -c 10 --pipeline 100 -t 1 -d "${DUR}s" --timeout 5s --connect "127.0.0.1:$PORT" \
        --server-pid "$SERVER_PID" "$url"
}
# latency_rate ROW: sets RATE for a latency row, once per run: its share of the reference
# server's median maximum in this run's base row (nginx's; over HTTP/3, Caddy's); measured
# first (a run of the base row on nginx_static or caddy, recorded as rep 0) if no
# reference has run it yet.
declare -A LATENCY_RATE=()
latency_rate() {
    local row=$1 base found ref=nginx_static
    case $row in
        latency_h2_*) base=h2_10b_rps ;;
        latency_h3_*) base=h3_10b_rps ref=caddy
            [[ " ${SERVERS[*]} " == *" caddy "* ]] ||
                die "$row: its rate is Caddy's h3_10b_rps maximum; add caddy to --servers" ;;
        *) base=keepalive_10b_rps ;;
    esac
    if [[ -z ${LATENCY_RATE[$row]:-} ]]; then
        if ! found=$(python3 "$HERE/abstat.py" latency-rate --results "$RESULTS" --row "$row"); then
            echo "ab: $row: no $ref run of $base yet; measuring $ref's maximum first" >&2
            run_row "$ref" "$base" 0 || return 1
            found=$(python3 "$HERE/abstat.py" latency-rate --results "$RESULTS" --row "$row") ||
                die "$row: $ref's $base run failed; no rate to hold"
        fi
        LATENCY_RATE[$row]=${found%% *}
        echo "ab: $row: ${LATENCY_RATE[$row]} requests/s (of ${found#* }'s $base)" >&2
    fi
    RATE=${LATENCY_RATE[$row]}
}
warm_up() {   # fills the caches, then checks each page once: status 200, whole body
    local url
    for url in "$URL_10B" "$URL_BIG"; do
        client timeout -s KILL 30 taskset -c "$CLIENT_CPU" "$BIN_DIR/http-perf" --json -c 4 -t 1 -d 1s \
            --connect "127.0.0.1:$PORT" "$url" >"$WORK/warm.json" 2>"$WORK/warm.err" ||
            { cat "$WORK/warm.err" >&2; die "warm-up of $1 on $url failed"; }
    done
    RESP_10B=$(python3 "$HERE/abstat.py" probe --addr "127.0.0.1:$PORT" --host "$HOST" --path / --body 10) ||
        die "$1 does not serve the 10-byte page on $URL_10B"
    RESP_BIG=$(python3 "$HERE/abstat.py" probe --addr "127.0.0.1:$PORT" --host "$HOST" --path "/bytes/$BIG" --body "$BIG") ||
        die "$1 does not serve the $BIG-byte page on $URL_BIG"
    if h3_row_name "$ROW"; then
        # The same pages over HTTP/3: the server's UDP side answers with the whole body.
        for url in "$URL_10B" "$URL_BIG"; do
            client timeout -s KILL 30 taskset -c "$CLIENT_CPU" "$BIN_DIR/http-perf" --json --h3 -c 1 \
                -t 1 -d 1s --connect "127.0.0.1:$PORT" "$url" >"$WORK/warm.json" 2>"$WORK/warm.err" ||
                { cat "$WORK/warm.err" >&2; die "HTTP/3 warm-up of $1 on $url failed"; }
        done
    fi
    if peer_is_cache "$1"; then
        # Both pages must now come from the peer's cache: a second later their Age is 1 s
        # or more (HAProxy sends no Age on a miss, Traffic Server sends Age 0).
        sleep 1.1
        for url in / "/bytes/$BIG"; do
            python3 "$HERE/abstat.py" probe --addr "127.0.0.1:$PORT" --host "$HOST" --path "$url" \
                --body "$([[ $url == / ]] && echo 10 || echo "$BIG")" --min-age 1 >/dev/null ||
                die "$1 did not answer $url from its cache (no Age of 1 s or more)"
        done
    fi
}

# One row against one server, on a freshly started server: every row starts from
# the same state whatever ran before it (and see docs/PERFORMANCE.md on stale
# timers in the proxy, which made rows after a connection-heavy row drop
# connections).
ROW=
run_row() {   # server row rep
    local s=$1 row=$2 rep=$3
    ROW=$row
    start_server "$s"
    if [[ $row == idle_tls_conn_bytes || $row == h3_idle_conn_bytes ]]; then
        local quic=()
        [[ $row == h3_* ]] && quic=(--h3)
        # The baseline is the fresh server, before the ramp (http-perf measures it).
        measure "$s" "$row" "$rep" hold 0 "" -- \
            timeout -s KILL 400 taskset -c "$CLIENT_CPU" "$BIN_DIR/http-perf" --json "${quic[@]}" \
            --hold "$HOLD" --hold-secs 5 --rounds 1 -t 1 --ramp-limit 240s \
            --connect "127.0.0.1:$PORT" --server-pid "$SERVER_PID" "$URL_10B" || return 1
    else
        warm_up "$s"
        case $row in
            handshakes_full_tls12)    tls_row "$s" "$row" "$rep" --tls 1.2 --tickets off ;;
            handshakes_full_tls13)    tls_row "$s" "$row" "$rep" --tls 1.3 --tickets off ;;
            handshakes_resumed_tls13) tls_row "$s" "$row" "$rep" --tls 1.3 --tickets on ;;
            keepalive_10b_rps) http_row "$s" "$row" "$rep" 10 "$RESP_10B" "$URL_10B" ;;
            keepalive_26k_rps) http_row "$s" "$row" "$rep" "$BIG" "$RESP_BIG" "$URL_BIG" ;;
            close_10b_rps)     http_row "$s" "$row" "$rep" 10 "$RESP_10B" "$URL_10B" -H "Connection: close" ;;
            close_26k_rps)     http_row "$s" "$row" "$rep" "$BIG" "$RESP_BIG" "$URL_BIG" -H "Connection: close" ;;
            h2_10b_rps)        h2_row "$s" "$row" "$rep" 10 "$URL_10B" ;;
            h2_26k_rps)        h2_row "$s" "$row" "$rep" "$BIG" "$URL_BIG" ;;
            # The seed's shape: a number of requests over 1024 connections, one stream each;
            # the time includes the 1024 handshakes, as h2load -n reports it.
            h2_1024c_rps)      h2_row "$s" "$row" "$rep" 10 "$URL_10B" -c 1024 -m 1 -n $((DUR * 10000)) ;;
            h3_10b_rps)        h3_row "$s" "$row" "$rep" 10 "$URL_10B" ;;
            h3_26k_rps)        h3_row "$s" "$row" "$rep" "$BIG" "$URL_BIG" ;;
            latency_*)         latency_row "$s" "$row" "$rep" "$RATE" ;;
        esac || return 1
    fi
    stop_server
}

T0=$(date +%s)
NO_H3=()
for rep in $(seq 1 "$RUNS"); do
    for row in "${ROWS[@]}"; do
        # The servers back to back for each row, in an order that rotates
        # from row to row and run to run, so that a change in the machine's
        # background load does not favour one of them.
        k=$(( (rep - 1) + $(printf '%s\n' "${ALL_ROWS[@]}" | grep -n -x "$row" | cut -d: -f1) ))
        if [[ $row == latency_* ]]; then latency_rate "$row" || exit 1; fi
        for i in "${!SERVERS[@]}"; do
            s=${SERVERS[$(((i + k) % ${#SERVERS[@]}))]}
            if h3_row_name "$row" && [[ " ${H3_SERVERS[*]} " != *" $s "* ]]; then
                echo "ab: run $rep/$RUNS: $row: $s skipped: it does not serve HTTP/3 here" >&2
                [[ " ${NO_H3[*]} " == *" $s "* ]] || NO_H3+=("$s")
                continue
            fi
            echo "ab: run $rep/$RUNS: $row: $s (load average $(cut -d' ' -f1-3 /proc/loadavg))" >&2
            if ! run_row "$s" "$row" "$rep"; then
                echo "ab: FAIL: $s stopped serving (above); partial results in $OUT" >&2
                stop_server || true
                python3 "$HERE/abstat.py" report --results "$RESULTS" --machine "$MACHINE" \
                    --out-json "$OUT/report.json" --out-svg "$OUT/report.svg" >"$OUT/table.md" || true
                exit 1
            fi
        done
    done
done
LOAD_END=$(cut -d' ' -f1-3 /proc/loadavg)
MACHINE=$(python3 -c 'import json,sys; m=json.loads(sys.argv[1]); m["loadavg_end"]=sys.argv[2]; m["duration_s"]=int(sys.argv[3]); print(json.dumps(m))' \
    "$MACHINE" "$LOAD_END" "$(( $(date +%s) - T0 ))")

python3 "$HERE/abstat.py" report --results "$RESULTS" --machine "$MACHINE" \
    --out-json "$OUT/report.json" --out-svg "$OUT/report.svg" >"$OUT/table.md"
# latest.* hold the last run over every row and server; an --only or --servers run stays
# in its directory.
if [[ ${#ONLY[@]} -eq 0 && ${#PICK[@]} -eq 0 ]]; then
    cp "$OUT/report.json" "$HERE/results/latest.json"
    cp "$OUT/report.svg" "$HERE/results/latest.svg"
    WROTE="benches/ab/results/latest.json and latest.svg"
else
    WROTE="$OUT/report.json and report.svg (an --only or --servers run does not replace latest.*)"
fi
[[ ${#SKIPPED[@]} -gt 0 ]] && echo "ab: skipped (not installed): ${SKIPPED[*]}" >&2
[[ ${#NO_H3[@]} -gt 0 ]] && echo "ab: h3_* rows not run on (no HTTP/3 in the installed build): ${NO_H3[*]}" >&2
echo
echo "Load average: $LOAD_START at the start, $LOAD_END at the end ($MODE run, $(( $(date +%s) - T0 )) s)."
echo
cat "$OUT/table.md"
if [[ ${#NO_H3[@]} -gt 0 ]]; then
    echo
    echo "h3_* rows: – for ${NO_H3[*]}: no HTTP/3 in the installed build (nginx 1.22 without http_v3, HAProxy 2.6 -QUIC, Traffic Server 9.2 TS_USE_QUIC 0)."
fi
if [[ ${AB_SYSCALLS:-0} == 1 ]]; then
    echo
    python3 "$HERE/abstat.py" syscalls --results "$RESULTS" --dir "$OUT"
fi
echo >&2
echo "ab: wrote $WROTE (raw runs: $OUT)" >&2
if [[ $FAILED -gt 0 ]]; then
    echo "ab: FAIL: $FAILED run(s) had errors (PROBLEM lines above, \"failed_runs\" in latest.json); they are left out of the medians" >&2
    exit 1
fi
