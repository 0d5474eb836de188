#!/usr/bin/env bash
# Server cost per keep-alive request, counted rather than timed: user-space instructions
# per request by part of the server (valgrind callgrind, self cost of every function, grouped
# by crate/module or library: see request_parts.py) and system calls per request (perf stat on
# the syscall tracepoints), for the proxy (cache hits over TLS on its record layer) and nginx
# serving the same pages from files, with the same certificate, TLS settings and rules as
# benches/ab/run.sh. Counts do not depend on the machine's load. The kernel's work is not in
# the instruction counts (this VM has no PMU: `perf stat -e instructions` is "not supported");
# the syscall count stands for it, and the user/system CPU split per request is printed too
# (timed: that column moves with the load).
#
#   benches/ab/request_cost.sh                          # 2 rows x proxy, nginx_static
#   benches/ab/request_cost.sh --rows keepalive_26k --servers proxy
#   PROXY_BIN_old=/tmp/old/proxy benches/ab/request_cost.sh --servers proxy_old proxy nginx_static
#   RC_FRANG="request_rate 100000000;" RC_PROXY_EXTRA="cluster { redis 127.0.0.1:6379; }" \
#       benches/ab/request_cost.sh --servers proxy     # the cost of a directive (docs/FLEET.md)
#
# RC_FRANG: directives added to the config's frang_limits block; RC_PROXY_EXTRA: directives
# added at the end of the proxy's config (both empty by default).
#
# Rows: keepalive_10b (`/`, 10 bytes), keepalive_26k (`/bytes/26624`), both
# `http-perf -t 1`, 100 connections as benches/ab/run.sh (RC_CG_CONNS [10] under valgrind);
# h2_10b (`/` over HTTP/2 with ALPN h2, `h2load -t 1 -m 10`, the same connection counts;
# not in the default rows, for the proxies). Proxied rows (not in the default rows; servers
# proxy, proxy_LABEL and nginx_proxy, nginx as a reverse proxy without its cache): the same
# keep-alive requests for `/` with the caches off, so every request goes to the origin over
# a kept-alive upstream connection: proxied_10b to the plain origin, proxied_tls_10b to an
# origin over TLS (nginx serving the 10-byte file with the same certificate, on core 0;
# the proxy with `server_tls on`, nginx with `proxy_pass https://`, both verifying the
# certificate and its name, both resuming sessions), proxied_h2_10b to an origin speaking
# HTTP/2 in cleartext (nginx serving the 10-byte file with `listen ... http2`, on core 0;
# the proxy with `server_proto h2`, nginx with `grpc_pass grpc://`, the only way Debian's
# nginx 1.22 speaks HTTP/2 to an upstream: its grpc module carries any request on a kept
# connection's streams). Each measurement: start the server (one worker,
# pinned to core 1; client and origin on core 0), 10 s of warm-up under valgrind (fills the
# proxy's cache), then a run whose steady state is counted: after RC_SETTLE [8] s (its
# handshakes done) the counters are zeroed, RC_SECS [10] s later dumped, and the requests in
# between are the calls of a function the server makes once per request. Then the same
# without valgrind for RC_SYS_SECS [5] s with the syscall counters. RC_PORT [24643] moves
# the ports (the server's, +1, the origin's, +2, the TLS origin's, +3, the h2c origin's,
# +4) off another run's. Output: a Markdown table on stdout, the per-function detail (the largest functions of each part, "other"
# included) in a temporary directory it names. Everything it starts is stopped by pid on
# exit.
set -euo pipefail
trap 'echo "request_cost: failed (exit $?) at line $LINENO: $BASH_COMMAND" >&2' ERR

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
HERE="$ROOT/benches/ab"
# shellcheck source=../lib/procs.sh
. "$ROOT/benches/lib/procs.sh"
BIN_DIR=${BIN_DIR:-$ROOT/target/release}
PROXY_BIN=${PROXY_BIN:-$BIN_DIR/proxy}
SECS=${RC_SECS:-10}
SETTLE=${RC_SETTLE:-8}
# Under valgrind the server is ~50x slower: 100 connections would spend the run in
# handshakes. 10 keep the server saturated (every event-loop turn finds several ready).
CG_CONNS=${RC_CG_CONNS:-10}
SYS_SECS=${RC_SYS_SECS:-5}
PORT=${RC_PORT:-24643}
ORIGIN_PORT=$((PORT + 2))
TLS_ORIGIN_PORT=$((PORT + 3))
H2_ORIGIN_PORT=$((PORT + 4))
HOST=tempesta-tech.com
BIG=26624
ROWS=(keepalive_10b keepalive_26k)
SERVERS=(proxy nginx_static)
die() { echo "request_cost: $*" >&2; exit 1; }
while [[ $# -gt 0 ]]; do
    case $1 in
        --rows) shift; ROWS=(); while [[ $# -gt 0 && $1 != --* ]]; do ROWS+=("$1"); shift; done; continue ;;
        --servers) shift; SERVERS=(); while [[ $# -gt 0 && $1 != --* ]]; do SERVERS+=("$1"); shift; done; continue ;;
        -h|--help) sed -n '2,43p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown argument '$1'" ;;
    esac
done
for tool in valgrind callgrind_control perf nginx openssl python3 taskset h2load; do
    command -v "$tool" >/dev/null || die "$tool is missing (apt-get install valgrind linux-perf nginx)"
done
[[ -x $PROXY_BIN && -x $BIN_DIR/http-perf && -x $BIN_DIR/origin ]] ||
    die "build first: cargo build --release -p proxy -p tls-perf"
# proxy_LABEL: another proxy binary, from PROXY_BIN_LABEL (old and new side by side).
other_proxy() {
    local var="PROXY_BIN_${1#proxy_}"
    [[ -x ${!var:-} ]] || die "$1 needs $var=path/to/that/proxy"
    echo "${!var}"
}
for s in "${SERVERS[@]}"; do [[ $s != proxy_* ]] || other_proxy "$s" >/dev/null; done

WORK=$(mktemp -d /tmp/reqcost.XXXXXX)
chmod 755 "$WORK"
SERVER_PID=
ORIGIN_PID=
TLS_ORIGIN_PID=
H2_ORIGIN_PID=
cleanup() {
    stop_pids ${SERVER_PID:+"$SERVER_PID"} ${ORIGIN_PID:+"$ORIGIN_PID"} \
        ${TLS_ORIGIN_PID:+"$TLS_ORIGIN_PID"} ${H2_ORIGIN_PID:+"$H2_ORIGIN_PID"}
}
trap cleanup EXIT

openssl req -x509 -nodes -days 2 -subj "/CN=$HOST" -addext "subjectAltName=DNS:$HOST" \
    -newkey ec -pkeyopt ec_paramgen_curve:P-256 \
    -keyout "$WORK/key.pem" -out "$WORK/cert.pem" >/dev/null 2>&1 || die "openssl req failed"
mkdir -p "$WORK/www/bytes" "$WORK/nginx/tmp"
printf '0123456789' >"$WORK/www/index"
head -c "$BIG" /dev/zero | tr '\0' 'x' >"$WORK/www/bytes/$BIG"
chmod -R a+rX "$WORK/www"
# The same configs as benches/ab/run.sh: etc/tempesta.conf and etc/nginx-static.conf with
# addresses and paths filled in, access logs off.
sed -e "s|^listen 127\.0\.0\.1:8443 \(proto=.*\);|listen 127.0.0.1:$PORT \1;|" \
    -e "s|^listen 127\.0\.0\.1:8080;|listen 127.0.0.1:$((PORT + 1));|" \
    -e "s|server 127\.0\.0\.1:8000;|server 127.0.0.1:$ORIGIN_PORT;|" \
    -e "s|tls_certificate certs/tempesta\.crt;|tls_certificate $WORK/cert.pem;|" \
    -e "s|tls_certificate_key certs/tempesta\.key;|tls_certificate_key $WORK/key.pem;|" \
    -e "s|^frang_limits {|frang_limits {\n    concurrent_tcp_connections 0;|" \
    "$ROOT/etc/tempesta.conf" >"$WORK/proxy.conf"
printf '\naccess_log off;\n%s\n' "${RC_PROXY_EXTRA:-}" >>"$WORK/proxy.conf"
[[ -z ${RC_FRANG:-} ]] || sed -i "s|^frang_limits {|frang_limits {\n    $RC_FRANG|" "$WORK/proxy.conf"
grep -q "server 127.0.0.1:$ORIGIN_PORT;" "$WORK/proxy.conf" || die "etc/tempesta.conf changed shape"
NGINX_USER="nobody nogroup"
getent group nogroup >/dev/null || NGINX_USER=nobody
sed -e "s|@WORKERS@|1|g" -e "s|@PREFIX@|$WORK/nginx|g" -e "s|@ADDR@|127.0.0.1:$PORT|g" \
    -e "s|@ROOT@|$WORK/www|g" -e "s|@CERT@|$WORK/cert.pem|g" -e "s|@KEY@|$WORK/key.pem|g" \
    -e "s|@USER@|$NGINX_USER|g" "$ROOT/etc/nginx-static.conf" >"$WORK/nginx/nginx.conf"
# The proxied rows' configurations: the caches off; the origin plain or over TLS.
sed -e "s|^cache 1;|cache 0;|" "$WORK/proxy.conf" >"$WORK/proxy-plain.conf"
grep -q "^cache 0;" "$WORK/proxy-plain.conf" || die "etc/tempesta.conf changed shape (cache 1)"
sed -e "s|server 127\.0\.0\.1:$ORIGIN_PORT;|server 127.0.0.1:$TLS_ORIGIN_PORT;\nserver_tls on;\nserver_tls_ca $WORK/cert.pem;\nserver_tls_sni $HOST;|" \
    "$WORK/proxy-plain.conf" >"$WORK/proxy-tls.conf"
sed -e "s|server 127\.0\.0\.1:$ORIGIN_PORT;|server 127.0.0.1:$H2_ORIGIN_PORT;\nserver_proto h2;|" \
    "$WORK/proxy-plain.conf" >"$WORK/proxy-h2.conf"
for kind in plain tls h2; do
    mkdir -p "$WORK/nginx-proxy-$kind/tmp"
    sed -e "s|@WORKERS@|1|g" -e "s|@PREFIX@|$WORK/nginx-proxy-$kind|g" \
        -e "s|@ADDR@|127.0.0.1:$PORT|g" -e "s|@CERT@|$WORK/cert.pem|g" -e "s|@KEY@|$WORK/key.pem|g" \
        -e "s|@USER@|$NGINX_USER|g" -e "s|@ORIGIN@|127.0.0.1:$ORIGIN_PORT|g" \
        -e "/proxy_cache_path/,/inactive=1h/d" -e "/proxy_cache ab;/d" \
        -e "/proxy_cache_valid/d" -e "/proxy_cache_lock/d" \
        "$ROOT/etc/nginx-cache.conf" >"$WORK/nginx-proxy-$kind/nginx.conf"
done
grep -q "^ *proxy_cache" "$WORK/nginx-proxy-plain/nginx.conf" && die "etc/nginx-cache.conf changed shape"
sed -i -e "s|server 127\.0\.0\.1:$ORIGIN_PORT;|server 127.0.0.1:$TLS_ORIGIN_PORT;|" \
    -e "s|proxy_pass http://origin;|proxy_pass https://origin;\n            proxy_ssl_verify on;\n            proxy_ssl_trusted_certificate $WORK/cert.pem;\n            proxy_ssl_name $HOST;\n            proxy_ssl_server_name on;\n            proxy_ssl_session_reuse on;|" \
    "$WORK/nginx-proxy-tls/nginx.conf"
grep -q "proxy_pass https://origin;" "$WORK/nginx-proxy-tls/nginx.conf" || die "etc/nginx-cache.conf changed shape (proxy_pass)"
sed -i -e "s|server 127\.0\.0\.1:$ORIGIN_PORT;|server 127.0.0.1:$H2_ORIGIN_PORT;|" \
    -e "s|proxy_pass http://origin;|grpc_pass grpc://origin;|" -e "/proxy_http_version 1.1;/d" \
    -e "/proxy_set_header Connection/d" -e "s|proxy_set_header Host|grpc_set_header Host|" \
    "$WORK/nginx-proxy-h2/nginx.conf"
grep -q "grpc_pass grpc://origin;" "$WORK/nginx-proxy-h2/nginx.conf" || die "etc/nginx-cache.conf changed shape (grpc_pass)"
# The TLS origin: nginx serving the files, with the same certificate (nginx-static.conf).
mkdir -p "$WORK/tls-origin/tmp"
sed -e "s|@WORKERS@|1|g" -e "s|@PREFIX@|$WORK/tls-origin|g" -e "s|@ADDR@|127.0.0.1:$TLS_ORIGIN_PORT|g" \
    -e "s|@ROOT@|$WORK/www|g" -e "s|@CERT@|$WORK/cert.pem|g" -e "s|@KEY@|$WORK/key.pem|g" \
    -e "s|@USER@|$NGINX_USER|g" "$ROOT/etc/nginx-static.conf" >"$WORK/tls-origin/nginx.conf"
# The h2c origin: the same, listening for HTTP/2 in cleartext (prior knowledge).
mkdir -p "$WORK/h2-origin/tmp"
sed -e "s|@WORKERS@|1|g" -e "s|@PREFIX@|$WORK/h2-origin|g" -e "s|@ADDR@|127.0.0.1:$H2_ORIGIN_PORT|g" \
    -e "s|@ROOT@|$WORK/www|g" -e "s|@CERT@|$WORK/cert.pem|g" -e "s|@KEY@|$WORK/key.pem|g" \
    -e "s|@USER@|$NGINX_USER|g" -e "s| ssl http2 | http2 |" \
    "$ROOT/etc/nginx-static.conf" >"$WORK/h2-origin/nginx.conf"
grep -q "listen 127.0.0.1:$H2_ORIGIN_PORT http2" "$WORK/h2-origin/nginx.conf" || die "etc/nginx-static.conf changed shape (listen)"

answers() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
wait_port() {   # pid port log
    local i
    for i in $(seq 1 600); do
        kill -0 "$1" 2>/dev/null || { cat "$3" >&2; die "$3: the process exited"; }
        answers "$2" && return 0
        sleep 0.1
    done
    die "nothing listens on $2 after 60 s ($3)"
}
! answers "$ORIGIN_PORT" || die "127.0.0.1:$ORIGIN_PORT already answers"
taskset -c 0 "$BIN_DIR/origin" --listen "127.0.0.1:$ORIGIN_PORT" --size 10 \
    --cache-control "public, max-age=3600" -t 1 >"$WORK/origin.log" 2>&1 &
ORIGIN_PID=$!
wait_port "$ORIGIN_PID" "$ORIGIN_PORT" "$WORK/origin.log"
if [[ " ${ROWS[*]} " == *" proxied_tls_10b "* ]]; then
    ! answers "$TLS_ORIGIN_PORT" || die "127.0.0.1:$TLS_ORIGIN_PORT already answers"
    taskset -c 0 nginx -p "$WORK/tls-origin/" -c "$WORK/tls-origin/nginx.conf" \
        -e "$WORK/tls-origin/error.log" -g "master_process off;" >"$WORK/tls-origin.log" 2>&1 &
    TLS_ORIGIN_PID=$!
    wait_port "$TLS_ORIGIN_PID" "$TLS_ORIGIN_PORT" "$WORK/tls-origin.log"
fi
if [[ " ${ROWS[*]} " == *" proxied_h2_10b "* ]]; then
    ! answers "$H2_ORIGIN_PORT" || die "127.0.0.1:$H2_ORIGIN_PORT already answers"
    taskset -c 0 nginx -p "$WORK/h2-origin/" -c "$WORK/h2-origin/nginx.conf" \
        -e "$WORK/h2-origin/error.log" -g "master_process off;" >"$WORK/h2-origin.log" 2>&1 &
    H2_ORIGIN_PID=$!
    wait_port "$H2_ORIGIN_PID" "$H2_ORIGIN_PORT" "$WORK/h2-origin.log"
fi

# The configuration of server $1 for row $2 (the proxies': a file; nginx's: its prefix).
conf_of() {
    case $1:$2 in
        proxy*:proxied_10b) echo "$WORK/proxy-plain.conf" ;;
        proxy*:proxied_tls_10b) echo "$WORK/proxy-tls.conf" ;;
        proxy*:proxied_h2_10b) echo "$WORK/proxy-h2.conf" ;;
        proxy*:*) echo "$WORK/proxy.conf" ;;
        nginx_proxy:proxied_10b) echo "$WORK/nginx-proxy-plain" ;;
        nginx_proxy:proxied_tls_10b) echo "$WORK/nginx-proxy-tls" ;;
        nginx_proxy:proxied_h2_10b) echo "$WORK/nginx-proxy-h2" ;;
        nginx_static:proxied_*) die "nginx_static serves files: the proxied rows are for nginx_proxy" ;;
        nginx_static:*) echo "$WORK/nginx" ;;
        nginx_proxy:*) die "nginx_proxy has no cache: it runs the proxied rows only" ;;
        *) die "unknown server '$1' (proxy, proxy_LABEL, nginx_static, nginx_proxy)" ;;
    esac
}

# $1: server, $2: row, rest: the command prefix (valgrind or nothing). Sets SERVER_PID.
start() {
    local s=$1 conf
    conf=$(conf_of "$1" "$2")
    shift 2
    # Another process on the port (SO_REUSEPORT) would take a share of the requests.
    ! answers "$PORT" || die "127.0.0.1:$PORT already answers"
    case $s in
        proxy) taskset -c 1 "$@" "$PROXY_BIN" -c "$conf" >"$WORK/$s.log" 2>&1 & ;;
        proxy_*) taskset -c 1 "$@" "$(other_proxy "$s")" -c "$conf" >"$WORK/$s.log" 2>&1 & ;;
        # One process (no master) so that the tools see the worker itself.
        nginx_*) taskset -c 1 "$@" nginx -p "$conf/" -c "$conf/nginx.conf" \
                     -e "$conf/error.log" -g "master_process off;" >"$WORK/$s.log" 2>&1 & ;;
    esac
    SERVER_PID=$!
    wait_port "$SERVER_PID" "$PORT" "$WORK/$s.log"
}
stop() { stop_pids "$SERVER_PID"; SERVER_PID=; }
# $1: row, $2: seconds, $3: JSON report file, $4: connections [100]. Fails on any error.
client() {
    local path
    case $1 in
        keepalive_10b | proxied_10b | proxied_tls_10b | proxied_h2_10b) path=/ ;;
        keepalive_26k) path=/bytes/$BIG ;;
        h2_10b)
            timeout -s KILL $(($2 + 60)) taskset -c 0 h2load -t 1 -c "${4:-100}" -m 10 \
                -D "$2" --connect-to="127.0.0.1:$PORT" "https://$HOST/" >"$3.txt" 2>&1 ||
                { cat "$3.txt" >&2; die "h2load failed"; }
            python3 "$HERE/request_parts.py" h2load "$3.txt" "$3" || die "the $1 run had errors: $3.txt"
            return ;;
        *) die "unknown row '$1' (keepalive_10b keepalive_26k h2_10b proxied_10b proxied_tls_10b proxied_h2_10b)" ;;
    esac
    timeout -s KILL $(($2 + 60)) taskset -c 0 "$BIN_DIR/http-perf" -c "${4:-100}" -t 1 -d "${2}s" \
        --timeout 60s --json --connect "127.0.0.1:$PORT" "https://$HOST$path" >"$3" 2>"$3.err" ||
        { cat "$3" "$3.err" >&2; die "http-perf failed"; }
    python3 "$HERE/request_parts.py" check "$3" || die "the $1 run had errors: $3"
}

echo "| server | row | Ir/request | crypto | record layer | HTTP parse | cache/file lookup | response | bookkeeping | event loop | alloc | copies | libc other | other | syscalls/request | CPU µs/request user+sys (timed) |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
for row in "${ROWS[@]}"; do
    for s in "${SERVERS[@]}"; do
        # Counted in the steady state only: the client connects (its handshakes are not
        # counted), runs RC_SETTLE s, then the counters are zeroed, RC_SECS s counted and
        # dumped while it still runs. The requests in that window are the calls of a
        # function the server calls once per request (request_parts.py: MARKERS).
        out="$WORK/callgrind-$s-$row.out"
        start "$s" "$row" valgrind --tool=callgrind --callgrind-out-file="$out" --dump-instr=no
        client "$row" 10 "$WORK/warm-$s-$row.json" "$CG_CONNS"
        client "$row" $((SETTLE + SECS + 5)) "$WORK/cg-$s-$row.json" "$CG_CONNS" &
        cpid=$!
        sleep "$SETTLE"
        callgrind_control -z "$SERVER_PID" >/dev/null
        sleep "$SECS"
        callgrind_control -d "$SERVER_PID" >/dev/null
        wait "$cpid" || die "the counted $row run on $s failed"
        # The newest dump is the file with the highest suffix.
        dump=$(ls -1 "$out".* 2>/dev/null | sort -t. -k3 -n | tail -1)
        [[ -n $dump ]] || die "callgrind wrote no dump for $s"
        mv "$dump" "$WORK/profile-$s-$row.callgrind"
        stop

        start "$s" "$row"
        client "$row" 2 "$WORK/warm2-$s-$row.json"
        read -r ut0 st0 < <(awk '{ print $14, $15 }' "/proc/$SERVER_PID/stat")
        perf stat -x, -e raw_syscalls:sys_enter -p "$SERVER_PID" -o "$WORK/sys-$s-$row.csv" \
            >/dev/null 2>&1 &
        spid=$!
        sleep 0.3
        client "$row" "$SYS_SECS" "$WORK/sys-$s-$row.json"
        kill -INT "$spid"; wait "$spid" 2>/dev/null || true
        read -r ut1 st1 < <(awk '{ print $14, $15 }' "/proc/$SERVER_PID/stat")
        stop
        python3 "$HERE/request_parts.py" row "$s" "$row" "$WORK/profile-$s-$row.callgrind" \
            "$WORK/sys-$s-$row.csv" "$WORK/sys-$s-$row.json" \
            "$((ut1 - ut0))" "$((st1 - st0))" "$(getconf CLK_TCK)" "$WORK/detail-$s-$row.txt"
    done
done
echo "request_cost: raw profiles and per-function detail in $WORK (detail-*.txt)" >&2
