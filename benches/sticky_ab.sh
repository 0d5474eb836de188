#!/usr/bin/env bash
# The per-request cost of the sticky cookie: the same proxy binary twice side by side, one
# without `sticky`, one with `sticky { cookie; }` and every request carrying a valid cookie
# (verified with HMAC-SHA256 and stripped before the origin), both in front of the bundled
# origin; http-perf runs against each in turn, ROUNDS times, and prints requests/s and the
# proxy's CPU seconds per 1000 requests of each run, and the CPU ratio (the number that
# survives a busy machine better than requests/s). Loopback only.
# Usage: benches/sticky_ab.sh [SECONDS_PER_RUN] [ROUNDS]   (after cargo build --release --bins)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=target/release
secs=${1:-5}
rounds=${2:-3}
tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$tmp"; }
trap cleanup EXIT
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
origin=$(port); plain=$(port); sticky=$(port)
"$bin/origin" --listen "127.0.0.1:$origin" --size 100 >/dev/null 2>&1 & pids+=($!)
for which in plain sticky; do
    p=${!which}
    extra=""
    [ "$which" = sticky ] && extra='sticky { cookie; secret "bench"; }'
    cat > "$tmp/$which.conf" <<CONF
listen 127.0.0.1:$p;
srv_group default { server 127.0.0.1:$origin; }
frang_limits { http_strict_host_checking false; }
$extra
vhost site { proxy_pass default; }
http_chain { -> site; }
CONF
    "$bin/proxy" -c "$tmp/$which.conf" >"$tmp/$which.log" 2>&1 & pids+=($!)
    eval "${which}_pid=$!"
done
sleep 1
# A valid cookie for http-perf's requests (no User-Agent, from 127.0.0.1).
cookie=$(curl -sS -A "" -D - -o /dev/null "http://127.0.0.1:$sticky/" | tr -d '\r' \
    | sed -n 's/^[Ss]et-[Cc]ookie: \(__tfw=[0-9a-f]*\).*/\1/p')
[ -n "$cookie" ] || { echo "no sticky cookie issued" >&2; exit 1; }
# Prints "REQ/S CPU_MS_PER_1000".
run() { "$bin/http-perf" -c 32 -t 1 -d "${secs}s" -H "Cookie: a=1; $cookie; b=2" --json \
    --server-pid "$2" "http://127.0.0.1:$1/" | python3 -c 'import json,sys
r = json.load(sys.stdin)
print(round(r["requests_per_sec"]), round(1000 * r["server_cpu_secs_per_1000_requests"], 1))'; }
for r in $(seq "$rounds"); do
    read -r a_rps a_cpu < <(run "$plain" "$plain_pid")
    read -r b_rps b_cpu < <(run "$sticky" "$sticky_pid")
    echo "round $r: plain $a_rps req/s $a_cpu ms CPU/1000 req; sticky $b_rps req/s $b_cpu ms CPU/1000 req;" \
        "CPU ratio sticky/plain $(python3 -c "print(round($b_cpu/$a_cpu,3))")"
done
