# Process helpers the benchmark scripts share (sourced, not run).

# tree PID: PID and all its descendants, one per line (nginx master + workers, a proxy and
# its worker processes).
tree() {
    local child
    echo "$1"
    for child in $(ps -o pid= --ppid "$1" 2>/dev/null); do tree "$child"; done
}

# stop_pids PID...: TERM each process tree, wait up to 5 s, then KILL what is left, and reap.
stop_pids() {
    local pid all=() i alive
    for pid in "$@"; do all+=($(tree "$pid")); done
    [[ ${#all[@]} -gt 0 ]] || return 0
    for pid in "${all[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    for i in $(seq 1 50); do
        alive=0
        for pid in "${all[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
        [[ $alive == 0 ]] && break
        sleep 0.1
    done
    for pid in "${all[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
    for pid in "$@"; do wait "$pid" 2>/dev/null || true; done
}
