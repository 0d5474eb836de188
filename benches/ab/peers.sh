# shellcheck shell=bash
# The optional peers of benches/ab/run.sh (sourced by it, not run): HAProxy, Traffic Server
# and Caddy. For each: whether it is installed, its config made from the template in etc/,
# and how it is started (in the foreground, on core $SERVER_CPU, its pid in $SERVER_PID).
# Uses run.sh's variables (WORK, ROOT, PORT, ORIGIN_PORT, HOST, WORKERS, SERVER_CPU) and
# functions (die, wait_listening). The overrides are listed under "Peers" in
# docs/PERFORMANCE.md.

# peer_missing SERVER: prints the missing program, if any (nothing for the other servers).
peer_missing() {
    case $1 in
        haproxy) command -v haproxy >/dev/null 2>&1 || echo haproxy ;;
        trafficserver) command -v traffic_server >/dev/null 2>&1 || echo traffic_server ;;
        caddy|caddy_proxy) command -v caddy >/dev/null 2>&1 || echo caddy ;;
    esac
}

# peer_is_cache SERVER: true for the peers whose rows must be cache hits (checked by Age).
peer_is_cache() { [[ $1 == haproxy || $1 == trafficserver ]]; }

# configure_peers SERVER...: writes the configs of the peers among SERVER... into $WORK.
configure_peers() {
    local s
    for s in "$@"; do
        case $s in
            haproxy) configure_haproxy ;;
            trafficserver) configure_trafficserver ;;
            caddy) configure_caddy caddy static ;;
            caddy_proxy) configure_caddy caddy_proxy proxy ;;
        esac
    done
}

# HAProxy: etc/haproxy-cache.cfg with the placeholders filled; the certificate and key in
# one file, as its `crt` takes them.
configure_haproxy() {
    local d="$WORK/haproxy"
    mkdir -p "$d"
    cat "$WORK/cert.pem" "$WORK/key.pem" >"$d/cert-key.pem"
    sed -e "s|@THREADS@|$WORKERS|g" -e "s|@ADDR@|127.0.0.1:$PORT|g" -e "s|@ORIGIN@|127.0.0.1:$ORIGIN_PORT|g" \
        -e "s|@PEM@|$d/cert-key.pem|g" -e "s|@TIMEOUT@|600|g" "$ROOT/etc/haproxy-cache.cfg" >"$d/haproxy.cfg"
    ! grep -v '^ *#' "$d/haproxy.cfg" | grep -q '@[A-Z]*@' || die "unfilled placeholder in etc/haproxy-cache.cfg"
    haproxy -c -q -f "$d/haproxy.cfg" >"$d/check.log" 2>&1 ||
        { cat "$d/check.log" >&2; die "the haproxy config does not load"; }
}

# Traffic Server: etc/trafficserver/ with the placeholders filled, in a runroot of its own
# (configuration, cache file, logs); the binaries and plugins are the package's.
configure_trafficserver() {
    local d="$WORK/trafficserver" f dest
    mkdir -p "$d/etc" "$d/var" "$d/run" "$d/log" "$d/cache"
    cp "$WORK/cert.pem" "$WORK/key.pem" "$d/"
    for f in "$ROOT"/etc/trafficserver/*; do
        dest="$d/etc/$(basename "$f")"
        [[ $(basename "$f") == runroot.yaml ]] && dest="$d/runroot.yaml"
        sed -e "s|@DIR@|$d|g" -e "s|@PORT@|$PORT|g" -e "s|@THREADS@|$WORKERS|g" -e "s|@TIMEOUT@|600|g" \
            -e "s|@HOST@|$HOST|g" -e "s|@ORIGIN@|127.0.0.1:$ORIGIN_PORT|g" "$f" >"$dest"
    done
    ! cat "$d"/etc/* "$d/runroot.yaml" | grep -v '^ *#' | grep -q '@[A-Z]*@' ||
        die "unfilled placeholder in etc/trafficserver/"
}

# Caddy: etc/caddy/Caddyfile with the placeholders filled and the lines of one mode kept
# (static: files from $WORK/www; proxy: reverse_proxy to the origin, no cache). HOME and the
# XDG directories point into the instance's directory (Caddy's storage and autosave).
configure_caddy() {
    local name=$1 mode=$2 d="$WORK/$1" other
    other=$([[ $mode == static ]] && echo proxy || echo static)
    mkdir -p "$d"
    sed -e "/#@$other /d" -e "s|#@$mode ||" -e "s|@ADDR@|127.0.0.1|g" -e "s|@PORT@|$PORT|g" \
        -e "s|@CERT@|$WORK/cert.pem|g" -e "s|@KEY@|$WORK/key.pem|g" -e "s|@ROOT@|$WORK/www|g" \
        -e "s|@ORIGIN@|127.0.0.1:$ORIGIN_PORT|g" -e "s|@TIMEOUT@|600|g" \
        "$ROOT/etc/caddy/Caddyfile" >"$d/Caddyfile"
    ! grep -v '^\s*#' "$d/Caddyfile" | grep -q '@[A-Z]*@' || die "unfilled placeholder in etc/caddy/Caddyfile"
    caddy_env "$d" caddy validate --adapter caddyfile --config "$d/Caddyfile" >"$d/check.log" 2>&1 ||
        { cat "$d/check.log" >&2; die "the $name config does not load"; }
}
caddy_env() {   # dir command...: runs the command with Caddy's directories in dir
    local d=$1
    shift
    HOME=$d XDG_DATA_HOME=$d/data XDG_CONFIG_HOME=$d/config "$@"
}

# start_peer SERVER: starts it on core $SERVER_CPU and waits for its port.
start_peer() {
    local s=$1 d="$WORK/$1"
    case $s in
        haproxy)
            # -db: in the foreground, so that its pid is the one to stop.
            taskset -c "$SERVER_CPU" haproxy -db -f "$d/haproxy.cfg" >"$WORK/haproxy.log" 2>&1 &
            SERVER_PID=$!
            wait_listening "$SERVER_PID" "$PORT" "$s" "$WORK/haproxy.log" ;;
        trafficserver)
            # A fresh cache for every row, as the other servers start empty.
            rm -f "$d/cache/cache.db"
            TS_RUNROOT="$d/runroot.yaml" taskset -c "$SERVER_CPU" traffic_server \
                --run-root="$d/runroot.yaml" >"$WORK/trafficserver.log" 2>&1 &
            SERVER_PID=$!
            wait_listening "$SERVER_PID" "$PORT" "$s" "$d/log/diags.log" ;;
        caddy|caddy_proxy)
            # One worker: GOMAXPROCS threads run Go code (the runtime keeps a few idle ones).
            caddy_env "$d" env GOMAXPROCS="$WORKERS" taskset -c "$SERVER_CPU" \
                caddy run --adapter caddyfile --config "$d/Caddyfile" >"$d/error.log" 2>&1 &
            SERVER_PID=$!
            wait_listening "$SERVER_PID" "$PORT" "$s" "$d/error.log" ;;
        *) die "start_peer: unknown peer $s" ;;
    esac
}
