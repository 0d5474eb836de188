#!/usr/bin/env bash
# HTTPS C100K gate: one server holds and serves C100K_CONNS concurrent TLS connections.
#
#   benches/c100k.sh                              # 100000 connections through `proxy`
#   C100K_CONNS=10000 benches/c100k.sh            # C10K
#   C100K_SERVER=origin benches/c100k.sh          # `origin --cert/--key` as the TLS server
#                                                 # (a baseline; also works without proxy)
#
# Phases (all by `http-perf --hold`): ramp (TCP + TLS handshake, at most
# C100K_HANDSHAKES in flight in all client processes together), hold every connection idle
# C100K_HOLD_SECS, then C100K_ROUNDS rounds that write one GET on every
# connection before reading any response.
#
# PASS needs: every connection established, none dropped while idle, every
# request of every round answered (2xx), the ramp within C100K_RAMP_LIMIT
# seconds, and server memory (RSS+swap of the process tree, above its idle
# baseline) per open connection within C100K_MAX_MEM_PER_CONN (8 KiB for the
# proxy from 10 000 connections by default; set it empty to not judge memory).
#
# Environment (defaults in brackets):
#   C100K_CONNS [100000]  C100K_SERVER [proxy|origin]  C100K_PORT [8443]
#   C100K_ORIGIN_PORT [8000]  C100K_PLAIN_PORT [8080]  C100K_STATS_PORT [9180]
#   C100K_ADDRS [127.0.0.1..127.0.0.N, N = max(4, what the port range needs)]
#   C100K_HOLD_SECS [5]  C100K_ROUNDS [2]  C100K_RAMP_LIMIT [180]
#   C100K_CLIENT_THREADS [2]
#   C100K_HANDSHAKES [1024, in all client processes]  C100K_JSON [unset: text]
#   C100K_PER_PROCESS [hard descriptor limit - 2000]
#   C100K_SERVER_PROCESSES [ceil(conns/PER_PROCESS)]  C100K_TICKETS [unset: full handshakes]
#   C100K_MAX_MEM_PER_CONN [proxy from 10000 connections: 8192; else unset]
#   BIN_DIR [target/release; built with cargo when a binary is missing]
#   C100K_PROXY_BIN [$BIN_DIR/proxy]
#
# The host is set up here, or the script says why it cannot be: the soft
# descriptor limit is raised to the hard one (20000 here), and each process
# (server worker process, client process) holds at most hard - 2000
# connections, so the server runs ceil(conns / that) worker processes and the
# client as many; servers listen on 0.0.0.0 and the client spreads connections
# over as many loopback addresses as ip_local_port_range needs (each destination
# address has its own ephemeral-port space, ~28k ports by default; at least 4);
# a loaded nf_conntrack with a table smaller than the connections is reported.
# The proxy runs etc/tempesta.conf with the overrides listed where its config is
# made below (docs/HTTP-PERF.md); the counters of all worker processes, summed
# by the stats endpoint (connections closed by reason, handshakes, responses),
# are printed at the end.
#
# Everything started here is killed by pid on exit. The script refuses to run
# if the port already answers (a leftover server would take connections).
set -euo pipefail

CONNS=${C100K_CONNS:-100000}
SERVER=${C100K_SERVER:-proxy}
PORT=${C100K_PORT:-8443}
ORIGIN_PORT=${C100K_ORIGIN_PORT:-8000}
STATS_PORT=${C100K_STATS_PORT:-9180}
PLAIN_PORT=${C100K_PLAIN_PORT:-8080}
HOLD_SECS=${C100K_HOLD_SECS:-5}
ROUNDS=${C100K_ROUNDS:-2}
RAMP_LIMIT=${C100K_RAMP_LIMIT:-180}
THREADS=${C100K_CLIENT_THREADS:-2}
HANDSHAKES=${C100K_HANDSHAKES:-1024}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN_DIR=${BIN_DIR:-${CARGO_TARGET_DIR:-$ROOT/target}/release}
PROXY_BIN=${C100K_PROXY_BIN:-$BIN_DIR/proxy}

die() { echo "c100k: $*" >&2; exit 2; }

case "$SERVER" in proxy|origin) ;; *) die "C100K_SERVER must be proxy or origin, not '$SERVER'";; esac
[[ "$CONNS" =~ ^[0-9]+$ && "$CONNS" -gt 0 ]] || die "C100K_CONNS must be a positive number"

# --- binaries -------------------------------------------------------------
need=("$BIN_DIR/http-perf" "$BIN_DIR/origin")
[[ $SERVER == proxy ]] && need+=("$PROXY_BIN")
for b in "${need[@]}"; do
    if [[ ! -x $b ]]; then
        echo "c100k: $b missing; building release binaries" >&2
        pkgs=(-p tls-perf)
        [[ $SERVER == proxy ]] && pkgs+=(-p proxy)
        (cd "$ROOT" && cargo build --release "${pkgs[@]}") || die "cargo build failed"
        break
    fi
done
for b in "${need[@]}"; do [[ -x $b ]] || die "no $b (set BIN_DIR or C100K_PROXY_BIN)"; done

# --- host: descriptors, addresses, ports, conntrack -----------------------------
# Descriptors: raise the soft limit to the hard one for everything started here; each
# process (server worker process or client process) holds at most HARD - 2000 connections
# (the rest: listeners, upstream connections, logs, pipes).
HARD=$(ulimit -Hn)
[[ $HARD == unlimited ]] && HARD=1048576
ulimit -n "$HARD" || die "cannot raise the descriptor limit to its hard limit $HARD"
[[ $HARD -ge 4096 ]] ||
    die "the hard descriptor limit is $HARD; raise it (limits.conf or LimitNOFILE=) to at least 4096"
PER_PROCESS=${C100K_PER_PROCESS:-$((HARD - 2000))}
# Ports: a client has ip_local_port_range ports per destination address, so the connections
# are spread over enough loopback addresses (all of 127.0.0.0/8 is local on Linux), each
# used at most to half of the range (the kernel's search for a free port in connect()
# slows down as the range fills: the seed measured a 3x slower ramp with nearly full
# ranges); the servers listen on 0.0.0.0.
read -r PORT_LO PORT_HI </proc/sys/net/ipv4/ip_local_port_range
PORTS_PER_ADDR=$(((PORT_HI - PORT_LO + 1) / 2))
NEED_ADDRS=$(((CONNS + PORTS_PER_ADDR - 1) / PORTS_PER_ADDR))
if [[ -z ${C100K_ADDRS:-} ]]; then
    n=$((NEED_ADDRS > 4 ? NEED_ADDRS : 4))
    [[ $n -le 250 ]] || die "$CONNS connections need $n loopback addresses at $PORTS_PER_ADDR ports each; widen net.ipv4.ip_local_port_range"
    ADDRS=$(seq -s, -f "127.0.0.%g" 1 "$n")
else
    ADDRS=$C100K_ADDRS
    IFS=, read -r -a given <<<"$ADDRS"
    [[ ${#given[@]} -ge $NEED_ADDRS ]] ||
        die "$CONNS connections need $NEED_ADDRS destination addresses with ip_local_port_range $PORT_LO-$PORT_HI ($PORTS_PER_ADDR usable ports each); C100K_ADDRS lists ${#given[@]}"
fi
# Connection tracking (only if the module is loaded): one entry per connection.
if [[ -r /proc/sys/net/netfilter/nf_conntrack_max ]]; then
    CT_MAX=$(cat /proc/sys/net/netfilter/nf_conntrack_max)
    if [[ $CT_MAX -lt $((CONNS + 10000)) ]]; then
        echo "c100k: warning: nf_conntrack_max is $CT_MAX, below $CONNS connections; new connections will be dropped once the table is full (sysctl -w net.netfilter.nf_conntrack_max=$((CONNS * 2)))" >&2
    fi
fi
echo "c100k: host: descriptors $HARD per process, ports $PORT_LO-$PORT_HI per destination address, $(tr ',' '\n' <<<"$ADDRS" | wc -l) loopback addresses, somaxconn $(cat /proc/sys/net/core/somaxconn)"

# --- cleanup: kill what we started, by pid ---------------------------------
WORK=$(mktemp -d /tmp/c100k.XXXXXX)
PIDS=()
# tree PID: a pid and all its descendants (proxy and origin fork worker processes).
source "$ROOT/benches/lib/procs.sh"
cleanup() {
    # Gracefully first (SIGTERM), then for sure (SIGKILL); workers die with their master.
    [[ ${#PIDS[@]} -gt 0 ]] && stop_pids "${PIDS[@]}"
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

answers() { (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; }

# Waits until $2:$3 accepts connections; fails loudly if process $1 died.
wait_listening() {
    local pid=$1 host=$2 port=$3 name=$4 log=$5 i
    for i in $(seq 1 300); do
        if ! kill -0 "$pid" 2>/dev/null; then
            echo "c100k: $name exited before listening on $host:$port; its log:" >&2
            cat "$log" >&2
            exit 2
        fi
        answers "$host" "$port" && return 0
        sleep 0.1
    done
    echo "c100k: $name did not listen on $host:$port within 30 s; its log:" >&2
    cat "$log" >&2
    exit 2
}

IFS=, read -r -a ADDR_LIST <<<"$ADDRS"
for a in "${ADDR_LIST[@]}"; do
    answers "$a" "$PORT" && die "something already answers on $a:$PORT; stop it (or set C100K_PORT): a leftover server would take part of the connections"
done
if [[ $SERVER == proxy ]]; then
    for p in "$ORIGIN_PORT" "$PLAIN_PORT" "$STATS_PORT"; do
        answers 127.0.0.1 "$p" &&
            die "something already answers on 127.0.0.1:$p; stop it or set C100K_ORIGIN_PORT, C100K_PLAIN_PORT or C100K_STATS_PORT"
    done
fi

# --- certificate: throwaway ECDSA P-256 -------------------------------------
openssl req -x509 -nodes -days 2 -subj /CN=localhost \
    -newkey ec -pkeyopt ec_paramgen_curve:P-256 \
    -keyout "$WORK/key.pem" -out "$WORK/cert.pem" >/dev/null 2>&1 ||
    die "openssl could not make a certificate"

# Server worker processes: each holds at most PER_PROCESS of the connections.
K=${C100K_SERVER_PROCESSES:-$(((CONNS + PER_PROCESS - 1) / PER_PROCESS))}
[[ $K -lt 1 ]] && K=1
# origin: threads per process so that the processes together use every core.
CORES=$(nproc)
ORIGIN_THREADS=$((CORES / K))
[[ $ORIGIN_THREADS -lt 1 ]] && ORIGIN_THREADS=1

# --- servers ----------------------------------------------------------------
if [[ $SERVER == proxy ]]; then
    # Cacheable answers, as in benches/ab: etc/tempesta.conf caches them (`cache 1`).
    "$BIN_DIR/origin" --listen "127.0.0.1:$ORIGIN_PORT" --cache-control "public, max-age=3600" \
        >"$WORK/origin.log" 2>&1 &
    PIDS+=($!)
    wait_listening "${PIDS[-1]}" 127.0.0.1 "$ORIGIN_PORT" origin "$WORK/origin.log"
    # etc/tempesta.conf with the addresses and certificate paths replaced, plus the bench
    # overrides (docs/HTTP-PERF.md): listen on 0.0.0.0 (the client spreads connections over
    # several loopback addresses), no per-address connection limit (one client address
    # holds every connection), a keep-alive timeout longer than ramp, hold and rounds together
    # (at least 600 s), no access log,
    # the statistics listener, and worker_processes from the descriptor limit.
    sed -e "s|^listen 127\.0\.0\.1:8443 \(proto=.*\);|listen 0.0.0.0:$PORT \1;|" \
        -e "s|^listen 127\.0\.0\.1:8080;|listen 127.0.0.1:$PLAIN_PORT;|" \
        -e "s|server 127\.0\.0\.1:8000;|server 127.0.0.1:$ORIGIN_PORT;|" \
        -e "s|tls_certificate certs/tempesta\.crt;|tls_certificate $WORK/cert.pem;|" \
        -e "s|tls_certificate_key certs/tempesta\.key;|tls_certificate_key $WORK/key.pem;|" \
        -e "s|^frang_limits {|frang_limits {\n    concurrent_tcp_connections 0;  # bench override|" \
        "$ROOT/etc/tempesta.conf" >"$WORK/proxy.conf"
    # The first connections must stay open through the whole ramp, the hold and the rounds.
    KEEPALIVE=$((RAMP_LIMIT + HOLD_SECS + 60 * ROUNDS + 120))
    [[ $KEEPALIVE -lt 600 ]] && KEEPALIVE=600
    cat >>"$WORK/proxy.conf" <<CONF

# bench overrides
access_log off;
keepalive_timeout $KEEPALIVE;
stats_listen 127.0.0.1:$STATS_PORT;
worker_processes $K;
CONF
    for want in "listen 0.0.0.0:$PORT proto=" "server 127.0.0.1:$ORIGIN_PORT;" \
                "tls_certificate $WORK/cert.pem;" "concurrent_tcp_connections 0;" "cache 1;"; do
        grep -qF "$want" "$WORK/proxy.conf" ||
            die "etc/tempesta.conf changed shape: could not make '$want' in the bench config"
    done
    "$PROXY_BIN" -c "$WORK/proxy.conf" >"$WORK/server.log" 2>&1 &
    SERVER_PID=$!
    PIDS+=("$SERVER_PID")
    wait_listening "$SERVER_PID" 127.0.0.1 "$PORT" proxy "$WORK/server.log"
else
    "$BIN_DIR/origin" --listen "0.0.0.0:$PORT" --cert "$WORK/cert.pem" --key "$WORK/key.pem" \
        --processes "$K" -t "$ORIGIN_THREADS" >"$WORK/server.log" 2>&1 &
    SERVER_PID=$!
    PIDS+=("$SERVER_PID")
    wait_listening "$SERVER_PID" 127.0.0.1 "$PORT" "origin (TLS)" "$WORK/server.log"
fi
# Let forked workers settle before the idle baseline is taken.
sleep 1

echo "c100k: $CONNS connections to $SERVER (pid $SERVER_PID, $K worker processes) on port $PORT over $ADDRS"
# Handshakes in flight are bounded for the whole client, not per thread: beyond what the
# server finishes in a second or two, more in flight adds only waiting (Little's law), and on
# this shared machine the client's own backlog then delays its Finished past any handshake
# deadline (docs/PERFORMANCE.md, C100K).
CLIENT_PROCS=$(((CONNS + PER_PROCESS - 1) / PER_PROCESS))
PER_THREAD=$(((HANDSHAKES + CLIENT_PROCS * THREADS - 1) / (CLIENT_PROCS * THREADS)))
echo "c100k: client: http-perf, $CLIENT_PROCS process(es) x ${THREADS} threads, at most $PER_PROCESS connections per process, $HANDSHAKES handshakes in flight in all"


# --- the gate ---------------------------------------------------------------
args=(--hold "$CONNS" --hold-secs "$HOLD_SECS" --rounds "$ROUNDS" -t "$THREADS"
      --handshakes "$PER_THREAD" --conns-per-process "$PER_PROCESS"
      --addrs "$ADDRS" --ramp-limit "${RAMP_LIMIT}s" --server-pid "$SERVER_PID")
# The gate's memory bound (8 KiB per connection above the idle baseline) for the proxy.
MAX_MEM=${C100K_MAX_MEM_PER_CONN-}
# (From 10 000 connections: below that the processes' fixed costs, ~20 MiB of allocator
# arenas and tables, dominate the per-connection figure.)
[[ -z $MAX_MEM && $SERVER == proxy && -z ${C100K_MAX_MEM_PER_CONN+set} && $CONNS -ge 10000 ]] &&
    MAX_MEM=8192
[[ -n $MAX_MEM ]] && args+=(--max-mem-per-conn "$MAX_MEM")
[[ -n ${C100K_JSON:-} ]] && args+=(--json)
# Resumed (PSK) TLS 1.3 handshakes in the ramp: each client thread reuses its last ticket.
[[ -n ${C100K_TICKETS:-} ]] && args+=(--tickets)
# Bound: ramp limit + hold + 60 s per round + slack.
BOUND=$((RAMP_LIMIT + HOLD_SECS + 60 * ROUNDS + 60))
# In the background, so that a signal to this script runs the cleanup at once.
# The proxy routes only etc/tempesta.conf's site (Host and SNI tempesta-tech.com).
URL="https://127.0.0.1:$PORT/"
if [[ $SERVER == proxy ]]; then
    URL="https://tempesta-tech.com:$PORT/"
    args+=(--connect "127.0.0.1:$PORT")
fi
# Kernel memory (slab: sockets, files, epoll items, conntrack entries, of both ends of every
# loopback connection), sampled once a second while the client runs; the peak above the
# baseline per connection is reported (rough: the whole host's slab, other jobs included).
slab_kib() { awk '/^Slab:/ {print $2}' /proc/meminfo; }
SLAB_BASE=$(slab_kib)
( peak=0; while :; do v=$(slab_kib); [[ $v -gt $peak ]] && { peak=$v; echo "$peak" >"$WORK/slab_peak"; }; sleep 1; done ) &
SAMPLER=$!
PIDS+=("$SAMPLER")
timeout --signal=KILL "$BOUND" "$BIN_DIR/http-perf" "${args[@]}" "$URL" &
CLIENT=$!
PIDS+=("$CLIENT")
set +e
wait "$CLIENT"
rc=$?
set -e
kill "$SAMPLER" 2>/dev/null || true
if [[ -r $WORK/slab_peak ]]; then
    peak=$(cat "$WORK/slab_peak")
    echo "c100k: kernel slab: $((SLAB_BASE / 1024)) MiB before, peak $((peak / 1024)) MiB, $(((peak - SLAB_BASE) * 1024 / CONNS)) B per connection (both ends on loopback; host-wide)"
fi
# The server's counters, summed over its K worker processes by the stats endpoint: how the
# connections ended, the handshakes, the responses; and how many processes answered.
if [[ $SERVER == proxy ]] && kill -0 "$SERVER_PID" 2>/dev/null; then
    metrics=$(curl -s --max-time 5 "http://127.0.0.1:$STATS_PORT/metrics" || true)
    echo "c100k: all $K worker processes (127.0.0.1:$STATS_PORT/metrics, summed):"
    grep -E '^ktls_proxy_(connections_closed_total|handshake_timeouts_total|tls_handshakes_total|tls_connections_total|ktls_fallbacks_total|responses_total|upstream_errors_total|blocks_total|stats_processes)' \
        <<<"$metrics" | grep -v ' 0$' | sed 's/^/  /' || true
fi
if ! kill -0 "$SERVER_PID" 2>/dev/null; then
    echo "c100k: the server died during the test; its log:" >&2
    tail -50 "$WORK/server.log" >&2
    rc=1
fi
case $rc in
    0) echo "c100k: PASS ($CONNS connections, $SERVER)" ;;
    137) echo "c100k: FAIL: http-perf overran ${BOUND}s and was killed" >&2 ;;
    *) echo "c100k: FAIL (exit $rc)" >&2 ;;
esac
exit "$rc"
