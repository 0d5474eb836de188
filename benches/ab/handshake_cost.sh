#!/usr/bin/env bash
# Server cost per TLS handshake, counted rather than timed: user-space instructions
# (valgrind callgrind, by shared object) and system calls (strace -c) per handshake, for
# the proxy and nginx serving the same certificate with the same TLS settings as
# benches/ab/run.sh. Counts do not depend on the machine's load, so they compare builds
# and servers on a busy machine where timings cannot (kernel time is not in them: the
# syscall count stands for it).
#
#   benches/ab/handshake_cost.sh                       # 3 rows x proxy, nginx_static
#   benches/ab/handshake_cost.sh --rows full_tls13 --servers proxy
#   PROXY_BIN=/tmp/old/proxy benches/ab/handshake_cost.sh --servers proxy
#
# Rows: full_tls12, full_tls13 (tls-perf --tickets off), resumed_tls13 (--tickets on).
# The client offers only HS_GROUPS [X25519:P-256] (tls-perf -C), so every server and build does
# the same key exchange, X25519 (AWS-LC would prefer X25519MLKEM768 from a client offering it);
# P-256 is there for TLS 1.2, where the list also names the curves the client accepts for the
# ECDSA certificate's signature.
# The proxy's rows name the TLS library `proxy --version` reports.
# Each measurement: start the server (one worker), 100 warm-up handshakes, zero the
# counters, HS_N [300] handshakes with tls-perf -l 10, read the counters, stop the server.
# Output: a Markdown table on stdout; raw profiles in a temporary directory it names.
# Everything it starts is stopped by pid on exit.
set -euo pipefail
trap 'echo "handshake_cost: failed (exit $?) at line $LINENO: $BASH_COMMAND" >&2' ERR

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
HERE="$ROOT/benches/ab"
BIN_DIR=${BIN_DIR:-$ROOT/target/release}
PROXY_BIN=${PROXY_BIN:-$BIN_DIR/proxy}
N=${HS_N:-300}
GROUPS_PINNED=${HS_GROUPS:-X25519:P-256}
PORT=${HS_PORT:-24543}
HOST=tempesta-tech.com
ROWS=(full_tls12 full_tls13 resumed_tls13)
SERVERS=(proxy nginx_static)
die() { echo "handshake_cost: $*" >&2; exit 1; }
while [[ $# -gt 0 ]]; do
    case $1 in
        --rows) shift; ROWS=(); while [[ $# -gt 0 && $1 != --* ]]; do ROWS+=("$1"); shift; done; continue ;;
        --servers) shift; SERVERS=(); while [[ $# -gt 0 && $1 != --* ]]; do SERVERS+=("$1"); shift; done; continue ;;
        -h|--help) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown argument '$1'" ;;
    esac
done
for tool in valgrind callgrind_control strace nginx openssl python3; do
    command -v "$tool" >/dev/null || die "$tool is missing (apt-get install valgrind strace nginx)"
done
[[ -x $PROXY_BIN && -x $BIN_DIR/tls-perf ]] || die "build first: cargo build --release -p proxy -p tls-perf"

WORK=$(mktemp -d /tmp/hscost.XXXXXX)
chmod 755 "$WORK"
SERVER_PID=
cleanup() {
    if [[ -n $SERVER_PID ]]; then kill "$SERVER_PID" 2>/dev/null || true; wait "$SERVER_PID" 2>/dev/null || true; fi
}
trap cleanup EXIT

openssl req -x509 -nodes -days 2 -subj "/CN=$HOST" -addext "subjectAltName=DNS:$HOST" \
    -newkey ec -pkeyopt ec_paramgen_curve:P-256 \
    -keyout "$WORK/key.pem" -out "$WORK/cert.pem" >/dev/null 2>&1 || die "openssl req failed"
# The same configs as benches/ab/run.sh: etc/tempesta.conf and etc/nginx-static.conf with
# addresses and paths filled in (no origin is needed: only handshakes are made).
sed -e "s|^listen 127\.0\.0\.1:8443 \(proto=.*\);|listen 127.0.0.1:$PORT \1;|" \
    -e "s|^listen 127\.0\.0\.1:8080;|listen 127.0.0.1:$((PORT + 1));|" \
    -e "s|tls_certificate certs/tempesta\.crt;|tls_certificate $WORK/cert.pem;|" \
    -e "s|tls_certificate_key certs/tempesta\.key;|tls_certificate_key $WORK/key.pem;|" \
    -e "s|^frang_limits {|frang_limits {\n    concurrent_tcp_connections 0;|" \
    "$ROOT/etc/tempesta.conf" >"$WORK/proxy.conf"
printf '\naccess_log off;\n' >>"$WORK/proxy.conf"
grep -q "^listen 127.0.0.1:$PORT proto=" "$WORK/proxy.conf" || die "etc/tempesta.conf changed shape"
mkdir -p "$WORK/nginx/tmp" "$WORK/www"
NGINX_USER="nobody nogroup"
getent group nogroup >/dev/null || NGINX_USER=nobody
sed -e "s|@WORKERS@|1|g" -e "s|@PREFIX@|$WORK/nginx|g" -e "s|@ADDR@|127.0.0.1:$PORT|g" \
    -e "s|@ROOT@|$WORK/www|g" -e "s|@CERT@|$WORK/cert.pem|g" -e "s|@KEY@|$WORK/key.pem|g" \
    -e "s|@USER@|$NGINX_USER|g" "$ROOT/etc/nginx-static.conf" >"$WORK/nginx/nginx.conf"

# $1: server, rest: the command prefix (valgrind or nothing). Sets SERVER_PID.
start() {
    local s=$1; shift
    # Another process on the port (SO_REUSEPORT) would take a share of the handshakes.
    ! (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null || die "127.0.0.1:$PORT already answers"
    case $s in
        proxy) taskset -c 1 "$@" "$PROXY_BIN" -c "$WORK/proxy.conf" >"$WORK/$s.log" 2>&1 & ;;
        # One process (no master) so that the tool sees the worker itself.
        nginx_static) taskset -c 1 "$@" nginx -p "$WORK/nginx/" -c "$WORK/nginx/nginx.conf" \
                          -e "$WORK/nginx/error.log" -g "master_process off;" >"$WORK/$s.log" 2>&1 & ;;
        *) die "unknown server '$s' (proxy, nginx_static)" ;;
    esac
    SERVER_PID=$!
    local i
    for i in $(seq 1 600); do
        kill -0 "$SERVER_PID" 2>/dev/null || { cat "$WORK/$s.log" >&2; die "$s exited"; }
        (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && return 0
        sleep 0.1
    done
    die "$s did not listen within 60 s"
}
stop() {
    kill "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
    SERVER_PID=
}
# $1: row, $2: handshakes. Fails unless every handshake succeeded.
client() {
    local tls tickets
    case $1 in
        full_tls12) tls=1.2 tickets=off ;;
        full_tls13) tls=1.3 tickets=off ;;
        resumed_tls13) tls=1.3 tickets=on ;;
        *) die "unknown row '$1' (full_tls12 full_tls13 resumed_tls13)" ;;
    esac
    timeout -s KILL 600 taskset -c 0 "$BIN_DIR/tls-perf" -q -l 10 -t 1 -n "$2" --tls "$tls" \
        --tickets "$tickets" -C "$GROUPS_PINNED" --sni "$HOST" 127.0.0.1 "$PORT" >"$WORK/client.out" 2>&1 ||
        { cat "$WORK/client.out" >&2; die "tls-perf failed"; }
}

PROXY_LIB=$("$PROXY_BIN" --version | sed -n 's/^TLS library: //p')
echo "Groups offered by the client: $GROUPS_PINNED; proxy: $PROXY_LIB; $(nginx -V 2>&1 | grep -o 'running with OpenSSL [^ ]*' || true)"
echo
echo "| server | row | Ir/handshake | libcrypto | libssl | libc | allocator | server | syscalls/handshake |"
echo "|---|---|---|---|---|---|---|---|---|"
for row in "${ROWS[@]}"; do
    for s in "${SERVERS[@]}"; do
        out="$WORK/callgrind-$s-$row.out"
        start "$s" valgrind --tool=callgrind --callgrind-out-file="$out" --dump-instr=no
        client "$row" 100
        callgrind_control -z "$SERVER_PID" >/dev/null
        client "$row" "$N"
        callgrind_control -d "$SERVER_PID" >/dev/null
        stop
        # The dump after zeroing is the file with the highest suffix.
        dump=$(ls -1 "$out".* 2>/dev/null | sort -t. -k3 -n | tail -1)
        [[ -n $dump ]] || die "callgrind wrote no dump for $s"
        cost=$(python3 "$HERE/callgrind_objects.py" "$dump" "$N")
        start "$s"
        client "$row" 100
        strace -c -f -q -p "$SERVER_PID" -o "$WORK/strace-$s-$row.txt" &
        spid=$!
        sleep 1
        client "$row" "$N"
        kill -INT "$spid"; wait "$spid" 2>/dev/null || true
        stop
        calls=$(awk '$NF == "total" { print $(NF-2) }' "$WORK/strace-$s-$row.txt")
        label=$s
        [[ $s == proxy ]] && label="proxy ($PROXY_LIB)"
        python3 - "$label" "$row" "$cost" "${calls:-0}" "$N" <<'EOF'
import json, sys
s, row, cost, calls, n = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
o = cost["objects"]
k = lambda v: f"{v / 1000:.0f} k"
print(f"| {s} | {row} | {k(cost['total'])} | " + " | ".join(k(o.get(g, 0)) for g in
      ("libcrypto", "libssl", "libc", "allocator", "server")) + f" | {calls / n:.1f} |")
EOF
    done
done
echo "handshake_cost: raw profiles in $WORK (callgrind_annotate FILE)" >&2
