#!/usr/bin/env bash
# HTTP/2 under attack: the proxy and nginx side by side, each flooded by
# `http-perf --h2-flood` while a legitimate h2load client runs. Not in CI.
#
#   benches/h2flood/run.sh                 # every attack, 30 s of flooding each (~30 min)
#   benches/h2flood/run.sh --quick         # every attack, 5 s each (~8 min)
#   benches/h2flood/run.sh --only ping reset
#
# Servers (one at a time, freshly started for every attack, pinned to core 1 with
# one worker, access logs off), the same setup as benches/ab:
#   proxy   target/release/proxy with etc/tempesta.conf (listen proto="h2,https",
#           `cache 1`) in front of the origin, addresses and certificate paths replaced,
#           plus the bench overrides: concurrent_tcp_connections 0, access_log off
#   nginx   nginx as a TLS reverse proxy with proxy_cache (etc/nginx-cache.conf,
#           `listen ... ssl http2`) in front of the same origin
# The origin (target/release/origin, 10-byte body on /, 26 KiB on /bytes/26624,
# Cache-Control: public, max-age=3600) and the clients run on core 0.
#
# For each attack and server: a warm-up fills the cache; then the legitimate client
# alone (h2load -c 4 -m 10 -t 1 -D D --rps=250 on the 10-byte page: 1000 requests/s
# offered, which both servers serve with most of their core to spare; per-request times
# from its --log-file give the p99) is the baseline; then
#   http-perf --h2-flood ATTACK -c 10 -d D+2 --reconnect --server-pid PID --json
# floods from 10 connections (a connection the server closes is replaced at once; the
# flooder runs at nice 19 beside h2load on core 0, so that it takes only the CPU the
# legitimate client leaves) and, one second in, the same h2load runs again. The flood tool samples the server's RSS
# every 100 ms; the growth is the peak over the sample taken before the flood.
# zero-window asks for the 26 KiB page, the other attacks for /.
#
# Output: a Markdown table on stdout and in benches/h2flood/results/latest.md,
# latest.json (not replaced by --only runs), raw runs and server logs in
# benches/h2flood/results/run-*/ (git-ignored). Targets, per attack: proxy RSS growth
# <= 16 MiB, legitimate throughput during the flood >= 80 % of without it, both at least
# as good as nginx's.
#
# Environment: H2F_PORT [25443], H2F_ORIGIN_PORT [25000], H2F_DURATION [30, quick 5],
# H2F_CONNS [10] flooding connections, H2F_RPS [250] requests/s per legitimate h2load
# client (0: a closed loop, as fast as the client core allows), BIN_DIR [target/release].
# Everything started here is stopped by pid on exit; the script refuses to run if a
# port it needs already answers, and stops (exit 1, with the log) if a server does not
# start. The binaries are copied first, so a rebuild during the run changes nothing.
set -euo pipefail
trap 'echo "h2flood: failed (exit $?) at line $LINENO: $BASH_COMMAND" >&2' ERR

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
HERE="$ROOT/benches/h2flood"
BIN_DIR=${BIN_DIR:-${CARGO_TARGET_DIR:-$ROOT/target}/release}
ALL_ATTACKS=(ping settings reset continuation hpack window empty-data zero-window priority
             unknown made-you-reset)
SERVERS=(proxy nginx)
HOST=tempesta-tech.com
BIG=26624
CLIENT_CPU=0
SERVER_CPU=1

die() { echo "h2flood: $*" >&2; exit 1; }
usage() { awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; }

QUICK=0
ONLY=()
while [[ $# -gt 0 ]]; do
    case $1 in
        --quick) QUICK=1 ;;
        --only) shift
                while [[ $# -gt 0 && $1 != --* ]]; do ONLY+=("$1"); shift; done
                [[ ${#ONLY[@]} -gt 0 ]] || die "--only needs attacks: ${ALL_ATTACKS[*]}"
                continue ;;
        -h|--help) usage; exit 0 ;;
        *) usage >&2; die "unknown argument '$1'" ;;
    esac
    shift
done
ATTACKS=("${ALL_ATTACKS[@]}")
if [[ ${#ONLY[@]} -gt 0 ]]; then
    for a in "${ONLY[@]}"; do
        [[ " ${ALL_ATTACKS[*]} " == *" $a "* ]] || die "unknown attack '$a'; attacks: ${ALL_ATTACKS[*]}"
    done
    ATTACKS=("${ONLY[@]}")
fi
if [[ $QUICK == 1 ]]; then DUR=${H2F_DURATION:-5}; MODE=quick; else DUR=${H2F_DURATION:-30}; MODE=full; fi
PORT=${H2F_PORT:-25443}
ORIGIN_PORT=${H2F_ORIGIN_PORT:-25000}
CONNS=${H2F_CONNS:-10}
# The legitimate load: a fixed offered rate (requests/s per h2load client, 4 clients), so
# that the ratio measures whether the server keeps serving it, not how much CPU the
# flooder leaves to the client core; H2F_RPS=0 for a closed loop (as fast as it can).
RPS=${H2F_RPS:-250}
LEGIT_RATE=
[[ $RPS != 0 ]] && LEGIT_RATE="--rps=$RPS"
COMMAND="$( (env | grep -E '^H2F_[A-Z_]+=' || true) | sort | tr '\n' ' ')benches/h2flood/run.sh"
[[ $QUICK == 1 ]] && COMMAND+=" --quick"
[[ ${#ONLY[@]} -gt 0 ]] && COMMAND+=" --only ${ONLY[*]}"
[[ $(nproc) -ge 2 ]] || die "needs 2 cores (clients on core $CLIENT_CPU, servers on core $SERVER_CPU)"

# --- binaries and tools -------------------------------------------------------------
if [[ $BIN_DIR == "$ROOT/target/release" ]]; then
    (cd "$ROOT" && cargo build --release --quiet -p proxy -p tls-perf) || die "cargo build failed"
fi
for t in nginx h2load taskset python3 openssl; do
    command -v "$t" >/dev/null || die "$t is missing (apt-get install nginx nghttp2-client util-linux python3 openssl)"
done
WORK=$(mktemp -d /tmp/h2flood.XXXXXX)
chmod 755 "$WORK"
for b in proxy http-perf origin; do
    [[ -x $BIN_DIR/$b ]] || die "no $BIN_DIR/$b"
    cp "$BIN_DIR/$b" "$WORK/$b"
done
"$WORK/http-perf" --help | grep -q -- --h2-flood || die "$BIN_DIR/http-perf has no --h2-flood"

STAMP=$(date -u +%Y%m%d-%H%M%S)
OUT="$HERE/results/run-$STAMP"
mkdir -p "$OUT"
PIDS=()
SERVER_PID=
# tree, stop_pids
source "$ROOT/benches/lib/procs.sh"
cleanup() {
    set +e
    [[ -n $SERVER_PID ]] && stop_pids "$SERVER_PID"
    [[ ${#PIDS[@]} -gt 0 ]] && stop_pids "${PIDS[@]}"
    for f in "$WORK"/*.log "$WORK"/nginx/error.log "$WORK"/proxy.conf "$WORK"/nginx/nginx.conf; do
        [[ -f $f ]] && cp "$f" "$OUT/$(basename "$(dirname "$f")")-$(basename "$f")" 2>/dev/null
    done
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

answers() { (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; }
for p in "$PORT" "$ORIGIN_PORT"; do
    answers 127.0.0.1 "$p" && die "something already answers on 127.0.0.1:$p; stop it or set H2F_PORT / H2F_ORIGIN_PORT"
done
wait_listening() {
    local pid=$1 port=$2 name=$3 log=$4 i
    for i in $(seq 1 300); do
        if ! kill -0 "$pid" 2>/dev/null; then
            echo "h2flood: $name exited before listening on 127.0.0.1:$port; its log:" >&2
            cat "$log" >&2 || true
            exit 1
        fi
        answers 127.0.0.1 "$port" && return 0
        sleep 0.1
    done
    cat "$log" >&2 || true
    die "$name did not listen on 127.0.0.1:$port within 30 s"
}

# --- certificate and configs ----------------------------------------------------------
openssl req -x509 -nodes -days 2 -subj "/CN=$HOST" \
    -addext "subjectAltName=DNS:$HOST,DNS:localhost,IP:127.0.0.1" \
    -newkey ec -pkeyopt ec_paramgen_curve:P-256 \
    -keyout "$WORK/key.pem" -out "$WORK/cert.pem" >/dev/null 2>&1 ||
    die "openssl could not make the certificate"
sed -e "s|^listen 127\.0\.0\.1:8443 \(proto=.*\);|listen 127.0.0.1:$PORT \1;|" \
    -e "s|^listen 127\.0\.0\.1:8080;||" \
    -e "s|server 127\.0\.0\.1:8000;|server 127.0.0.1:$ORIGIN_PORT;|" \
    -e "s|tls_certificate certs/tempesta\.crt;|tls_certificate $WORK/cert.pem;|" \
    -e "s|tls_certificate_key certs/tempesta\.key;|tls_certificate_key $WORK/key.pem;|" \
    -e "s|^frang_limits {|frang_limits {\n    concurrent_tcp_connections 0;  # bench override|" \
    "$ROOT/etc/tempesta.conf" >"$WORK/proxy.conf"
printf '\n# bench overrides\naccess_log off;\n' >>"$WORK/proxy.conf"
for want in "listen 127.0.0.1:$PORT proto=\"h2,https\";" "server 127.0.0.1:$ORIGIN_PORT;" \
            "tls_certificate $WORK/cert.pem;" "concurrent_tcp_connections 0;" "cache 1;"; do
    grep -qF "$want" "$WORK/proxy.conf" ||
        die "etc/tempesta.conf changed shape: could not make '$want' in the bench config"
done
"$WORK/proxy" -t -c "$WORK/proxy.conf" >"$WORK/proxy-check.log" 2>&1 ||
    { cat "$WORK/proxy-check.log" >&2; die "the bench proxy config does not load"; }
NGINX_USER="nobody nogroup"
getent group nogroup >/dev/null || NGINX_USER=nobody
mkdir -p "$WORK/nginx/tmp"
sed -e "s|@WORKERS@|1|g" -e "s|@PREFIX@|$WORK/nginx|g" -e "s|@ADDR@|127.0.0.1:$PORT|g" \
    -e "s|@ORIGIN@|127.0.0.1:$ORIGIN_PORT|g" -e "s|@CERT@|$WORK/cert.pem|g" \
    -e "s|@KEY@|$WORK/key.pem|g" -e "s|@USER@|$NGINX_USER|g" \
    "$ROOT/etc/nginx-cache.conf" >"$WORK/nginx/nginx.conf"
grep -q "ssl http2" "$WORK/nginx/nginx.conf" || die "etc/nginx-cache.conf has no 'ssl http2' listener"
nginx -t -q -p "$WORK/nginx/" -c "$WORK/nginx/nginx.conf" -e "$WORK/nginx/error.log" 2>"$WORK/nginx-check.log" ||
    { cat "$WORK/nginx-check.log" >&2; die "the nginx config does not load"; }

# --- origin and machine -----------------------------------------------------------------
taskset -c "$CLIENT_CPU" "$WORK/origin" --listen "127.0.0.1:$ORIGIN_PORT" --size 10 \
    --cache-control "public, max-age=3600" -t 1 >"$WORK/origin.log" 2>&1 &
PIDS+=($!)
wait_listening "${PIDS[-1]}" "$ORIGIN_PORT" origin "$WORK/origin.log"
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
MACHINE=$(python3 "$ROOT/benches/ab/abstat.py" machine --root "$ROOT" --load "$LOAD_START" \
    --mode "$MODE, ${DUR}s of flooding per attack" --runs 1 --command "$COMMAND" \
    --placement "clients (h2load, http-perf --h2-flood) and origin pinned to core $CLIENT_CPU; each server pinned to core $SERVER_CPU with 1 worker" \
    --client "h2load -c 4 -m 10 -t 1 -D $DUR $LEGIT_RATE; http-perf --h2-flood ATTACK -c $CONNS -d $((DUR + 2)) --reconnect")
echo "h2flood: $MODE run, attacks: ${ATTACKS[*]}; load average at start: $LOAD_START; raw results in $OUT" >&2

# --- one attack against one server -------------------------------------------------------
start_server() {
    case $1 in
        proxy)
            taskset -c "$SERVER_CPU" "$WORK/proxy" -c "$WORK/proxy.conf" >"$WORK/proxy.log" 2>&1 &
            SERVER_PID=$!
            wait_listening "$SERVER_PID" "$PORT" proxy "$WORK/proxy.log" ;;
        nginx)
            taskset -c "$SERVER_CPU" nginx -p "$WORK/nginx/" -c "$WORK/nginx/nginx.conf" \
                -e "$WORK/nginx/error.log" >"$WORK/nginx-stdout.log" 2>&1 &
            SERVER_PID=$!
            wait_listening "$SERVER_PID" "$PORT" nginx "$WORK/nginx/error.log" ;;
    esac
    sleep 1
}
stop_server() {
    [[ -n $SERVER_PID ]] && stop_pids "$SERVER_PID"
    SERVER_PID=
    local i
    for i in $(seq 1 50); do answers 127.0.0.1 "$PORT" || return 0; sleep 0.1; done
    die "the port $PORT still answers after the server was stopped"
}
legit() {     # out log: the legitimate client, bounded
    timeout -s KILL $((DUR + 30)) taskset -c "$CLIENT_CPU" h2load -c 4 -m 10 -t 1 -D "$DUR" $LEGIT_RATE \
        --connect-to="127.0.0.1:$PORT" --log-file="$2" "https://$HOST/" >"$1" 2>&1 || true
}
RESULTS="$OUT/results.jsonl"
: >"$RESULTS"
FAILED=0
run_pair() {  # server attack
    local s=$1 a=$2 path=/ dir="$OUT/$1-$2"
    mkdir -p "$dir"
    [[ $a == zero-window ]] && path=/bytes/$BIG
    start_server "$s"
    for url in "https://$HOST/" "https://$HOST/bytes/$BIG"; do
        timeout -s KILL 30 taskset -c "$CLIENT_CPU" "$WORK/http-perf" -c 2 -t 1 -d 1s \
            --connect "127.0.0.1:$PORT" "$url" >"$dir/warm.txt" 2>&1 || die "$s: warm-up on $url failed"
    done
    legit "$dir/base.txt" "$dir/base.log"
    # The flooder shares core 0 with h2load at the lowest priority: it gets what the
    # legitimate client leaves, so the legitimate numbers measure the server, not a
    # client starved by the attacker's own CPU.
    timeout -s KILL $((DUR + 30)) taskset -c "$CLIENT_CPU" nice -n 19 "$WORK/http-perf" --h2-flood "$a" \
        -c "$CONNS" -t 1 -d $((DUR + 2)) --reconnect --json --server-pid "$SERVER_PID" \
        --connect "127.0.0.1:$PORT" "https://$HOST$path" >"$dir/attack.json" 2>"$dir/attack.err" &
    local flood=$!
    PIDS+=("$flood")
    sleep 1
    legit "$dir/flood.txt" "$dir/flood.log"
    wait "$flood" || echo "h2flood: $s $a: the flood tool exited $? ($(cat "$dir/attack.err"))" >&2
    kill -0 "$SERVER_PID" 2>/dev/null || { echo "h2flood: $s died during $a" >&2; FAILED=$((FAILED + 1)); }
    python3 "$HERE/h2fstat.py" pair --out "$RESULTS" \
        --meta "{\"server\":\"$s\",\"attack_kind\":\"$a\",\"duration_s\":$DUR,\"flood_connections\":$CONNS}" \
        --base "$dir/base.txt" --base-log "$dir/base.log" --flood "$dir/flood.txt" \
        --flood-log "$dir/flood.log" --attack "$dir/attack.json" || FAILED=$((FAILED + 1))
    # The per-request logs are large; the reports keep what matters.
    rm -f "$dir/base.log" "$dir/flood.log"
    stop_server
}

T0=$(date +%s)
k=0
for a in "${ATTACKS[@]}"; do
    # The two servers back to back, in an order that alternates from attack to attack.
    for i in 0 1; do
        s=${SERVERS[$(((i + k) % 2))]}
        echo "h2flood: $a: $s (load average $(cut -d' ' -f1-3 /proc/loadavg))" >&2
        run_pair "$s" "$a"
    done
    k=$((k + 1))
done
LOAD_END=$(cut -d' ' -f1-3 /proc/loadavg)
MACHINE=$(python3 -c 'import json,sys; m=json.loads(sys.argv[1]); m["loadavg_end"]=sys.argv[2]; m["duration_s"]=int(sys.argv[3]); print(json.dumps(m))' \
    "$MACHINE" "$LOAD_END" "$(( $(date +%s) - T0 ))")
python3 "$HERE/h2fstat.py" report --results "$RESULTS" --machine "$MACHINE" \
    --out-json "$OUT/report.json" --out-md "$OUT/report.md" >/dev/null
if [[ ${#ONLY[@]} -eq 0 ]]; then
    cp "$OUT/report.json" "$HERE/results/latest.json"
    cp "$OUT/report.md" "$HERE/results/latest.md"
    WROTE="benches/h2flood/results/latest.md and latest.json"
else
    WROTE="$OUT/report.md and report.json (an --only run does not replace latest.*)"
fi
echo
cat "$OUT/report.md"
echo "h2flood: wrote $WROTE (raw runs: $OUT)" >&2
[[ $FAILED == 0 ]] || { echo "h2flood: FAIL: $FAILED run(s) unusable or a server died" >&2; exit 1; }
