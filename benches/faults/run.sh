#!/usr/bin/env bash
# Faults with figures (issue 38): the scenarios of tests/src/faults/scenarios.rs (the
# functions tests/tests/faults.rs runs for 3 s each in CI) for longer, against the proxy and
# against nginx as a reverse proxy in front of the same origin. Counts, not performance: per
# run, requests sent, answered by status, cut, lost (sent and never answered), not sent,
# retried, the server's RSS and descriptors after a warm-up and at the end, crashes.
#
#   benches/faults/run.sh                          # every scenario, 30 s each, proxy + nginx (~15 min)
#   benches/faults/run.sh --secs 10 --servers proxy
#   benches/faults/run.sh --scenarios origin_killed,fd_exhaustion
#   benches/faults/run.sh --soak 3600 --soak-rate-of-max 0.7   # the 1-hour soak (not in CI), both servers
#   benches/faults/run.sh --soak 300 --soak-rate-of-max 0.7 --max-rps 2000 --soak-window 30
#
# Options go to target/release/faults (tests/src/bin/faults.rs): --servers proxy,nginx,
# --secs N, --h1-rate R [200], --h2-rate R [100], --scenarios a,b, --soak SECS.
# The soak (docs/RELIABILITY.md, "The soak") runs the issue's mix instead of the scenarios:
# HTTP/1.1 and HTTP/2, 70 % cache hits and 30 % misses, WebSocket sessions echoed through
# the server, counted by window, with RSS drift, descriptor growth and p99 stability judged:
#   --soak-rate-of-max F   run at F times the highest rate of the mix: --max-rps N, or probed
#                          on each server first (4 s steps rising by a quarter from 300
#                          requests/s until one fails; the clients share this machine)
#   --max-rps N            the highest rate (requests/s, both protocols) instead of the probe
#   --ws-rate R            WebSocket sessions begun a second [one per 100 requests/s]
#   --soak-window SECS     the report's window [60]; the first is the warm-up
# Without --soak-rate-of-max the soak runs at --h1-rate and --h2-rate.
# Output: the Markdown table on stdout and in benches/faults/results/latest.md, every figure
# in benches/faults/results/latest.json (a --soak run writes soak.md / soak.json instead).
# Exit status 1 when a run missed its expectation (the rows say which and why).
#
# Needs root (network namespaces, a memory cgroup, prlimit on the server), iproute2, nginx,
# python3 with h2 (etc/need-packages.sh installs iproute2 and nginx when run as root). Every process is started and stopped by pid by
# the harness; the namespaces and cgroups it creates are deleted by their guards on every
# exit path, and the trap below removes any left by a run that was killed outright.
set -euo pipefail
cd "$(dirname "$0")/../.."
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/target}
OUT=benches/faults/results
mkdir -p "$OUT"

[[ $(id -u) == 0 ]] || { echo "faults: run as root (namespaces, cgroups, prlimit)" >&2; exit 2; }
etc/need-packages.sh iproute2 nftables nginx
command -v nginx >/dev/null || { echo "faults: nginx is missing (apt-get install nginx)" >&2; exit 2; }
python3 -c 'import h2.connection' 2>/dev/null || { echo "faults: python3 h2 is missing (pip install h2)" >&2; exit 2; }

source benches/lib/procs.sh
RUNNER=""
cleanup() {
    # A run stopped outright leaves its servers and clients (its process tree, stopped by
    # pid here), its namespaces (ktlsf-PID-N) and cgroups (ktls-faults-PID-N).
    if [[ -n $RUNNER ]]; then
        stop_pids "$RUNNER"
        for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^ktlsf-$RUNNER-" || true); do
            ip netns del "$ns" 2>/dev/null || true
        done
        for cg in /sys/fs/cgroup/memory/ktls-faults-"$RUNNER"-*; do
            [[ -d $cg ]] && rmdir "$cg" 2>/dev/null || true
        done
    fi
}
trap cleanup EXIT INT TERM

nice -n 10 cargo build --release -q -p proxy --bins
nice -n 10 cargo build --release -q -p e2e --bin faults

NAME=latest
for arg in "$@"; do [[ $arg == --soak ]] && NAME=soak; done
COMMIT=$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . ':!benches/faults/results' || echo "+dirty")
{
    echo "commit $COMMIT, $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, kernel $(uname -r), nginx $(nginx -v 2>&1 | sed 's/.*\///')"
    echo "command: benches/faults/run.sh $*"
    echo
} > "$OUT/$NAME.md"
set +e
KTLS_PROXY_BIN_DIR=$CARGO_TARGET_DIR/release "$CARGO_TARGET_DIR/release/faults" --json "$OUT/$NAME.json" "$@" \
    > >(tee -a "$OUT/$NAME.md") &
RUNNER=$!
wait "$RUNNER"
STATUS=$?
RUNNER=""
set -e
exit "$STATUS"
