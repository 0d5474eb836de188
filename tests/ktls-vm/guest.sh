#!/bin/sh
# tests/ktls-vm/guest.sh — runs inside the kTLS guest (busybox sh), started by /init.
#
# Stage 1: the ktls self-test with the tls module loaded (every offloadable suite must end up
#          with both directions in the kernel), then with the module removed and its
#          autoloading blocked (every case must fall back to user space and still pass).
# Stage 2: the real proxy in front of an origin, driven by independent user-space OpenSSL
#          clients (guest_client, openssl s_client): see stage2_proxy below. Skipped (SKIP) when
#          /bin/proxy is absent.
#
# Last line: `guest: PASS cases=N ktls_both=K` or `guest: FAIL <why>`; exit status to match.

TOTAL_CASES=0
TOTAL_KTLS=0
FAILURES=""

note_failure() { FAILURES="$FAILURES${FAILURES:+; }$*"; }

# run_selftest <label> <expect>: runs the self-test, adds its counts, records a failure.
run_selftest() {
  label=$1
  expect=$2
  echo "== stage 1 ($label): selftest --expect $expect"
  /bin/selftest --expect "$expect" >/tmp/selftest.log 2>&1
  rc=$?
  cat /tmp/selftest.log
  verdict=$(grep '^selftest: \(PASS\|FAIL\)' /tmp/selftest.log | tail -1)
  cases=$(echo "$verdict" | sed -n 's/.*cases=\([0-9]*\).*/\1/p')
  ktls=$(echo "$verdict" | sed -n 's/.*ktls_both=\([0-9]*\).*/\1/p')
  TOTAL_CASES=$((TOTAL_CASES + ${cases:-0}))
  TOTAL_KTLS=$((TOTAL_KTLS + ${ktls:-0}))
  if [ "$rc" != 0 ] || [ "${verdict#selftest: PASS}" = "$verdict" ]; then
    note_failure "selftest $label (rc=$rc${verdict:+: $verdict})"
  fi
}

stage1_with_module() {
  if ! grep -q '^tls ' /proc/modules; then
    note_failure "tls module did not load"
    return
  fi
  run_selftest "tls module loaded" ktls
}

stage1_without_module() {
  # Without this, TCP_ULP "tls" would make the kernel load the module right back.
  echo /bin/false >/proc/sys/kernel/modprobe
  tries=0
  # Sockets of the previous run may hold the module for a moment after they close.
  while grep -q '^tls ' /proc/modules; do
    rmmod tls 2>/dev/null && break
    tries=$((tries + 1))
    if [ "$tries" -ge 20 ]; then
      note_failure "rmmod tls: module still in use"
      echo /sbin/modprobe >/proc/sys/kernel/modprobe
      return
    fi
    sleep 0.5
  done
  run_selftest "tls module removed" fallback
  echo /sbin/modprobe >/proc/sys/kernel/modprobe
  modprobe tls 2>/dev/null
}

# ---------------------------------------------------------------- stage 2 (proxy)
# The real proxy (config like etc/tempesta.conf, worker_threads 1, ECDSA P-256 certificate from
# run.sh) in front of guest_origin (/bytes/N: N bytes of a known pattern), driven by clients
# that share no code with the proxy: guest_client (the openssl crate's SslStream, user-space
# OpenSSL; checks every body byte) and openssl s_client (bodies compared with cmp against the
# origin's own answer). Every process is started in the background, its pid kept, and exactly
# those pids are stopped.
S2=/tmp/stage2
HTTPS=127.0.0.1:8443
STATS=127.0.0.1:9100
ORIGIN=127.0.0.1:8000
S2_PIDS=""
PROXY_PID=""

s2_pass() {
  TOTAL_CASES=$((TOTAL_CASES + 1))
  echo "case $1 PASS${2:+ $2}"
}
s2_fail() {
  TOTAL_CASES=$((TOTAL_CASES + 1))
  echo "case $1 FAIL :: $2"
  note_failure "stage 2 $1: $2"
}
# s2_check <label> <condition words...> -- <detail>: a case from a `test` expression.
s2_check() {
  label=$1
  shift
  cond=""
  while [ "$1" != "--" ]; do
    cond="$cond $1"
    shift
  done
  shift
  # shellcheck disable=SC2086
  if [ $cond ]; then s2_pass "$label" "$*"; else s2_fail "$label" "$*"; fi
}

s2_start() { # s2_start <log> <cmd...>: background process, pid in LAST_PID
  log=$1
  shift
  "$@" >"$log" 2>&1 &
  LAST_PID=$!
  S2_PIDS="$S2_PIDS $LAST_PID"
}
s2_stop() { # s2_stop <pid>: TERM, then KILL after 5 s
  [ -n "$1" ] || return
  kill "$1" 2>/dev/null
  i=0
  while alive "$1" && [ $i -lt 50 ]; do
    sleep 0.1
    i=$((i + 1))
  done
  kill -9 "$1" 2>/dev/null
  wait "$1" 2>/dev/null
  S2_PIDS=$(echo "$S2_PIDS" | tr ' ' '\n' | grep -vx "$1" | tr '\n' ' ')
}

# (busybox 1.35 wget writes nothing with -T, hence timeout(1).)
metrics() { timeout 10 wget -q -O - "http://$STATS/metrics" 2>/dev/null; }
# metric <name{labels}>: its value now (0 if absent).
metric() {
  v=$(metrics | grep -F "$1 " | awk '{print $2}' | head -1)
  echo "${v:-0}"
}
metric_sum() { # sum of every series of a family
  metrics | grep "^$1" | awk '{s += $2} END {print s + 0}'
}
tls_stat() { awk -v k="$1" '$1 == k {print $2}' /proc/net/tls_stat 2>/dev/null; }
# alive <pid>: running (an exited child stays a zombie until waited for; that is not alive).
alive() {
  st=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)
  [ -n "$st" ] && [ "$st" != Z ]
}
uptime_s() { cut -d' ' -f1 /proc/uptime; }
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null; }
rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status" 2>/dev/null; }

# write_conf <file> <auto|on|user|off>
write_conf() {
  cat >"$1" <<CONF
# stage 2 of tests/ktls-vm: etc/tempesta.conf's shape on loopback, one worker.
listen $HTTPS proto="h2,https";
srv_group default {
    server $ORIGIN;
}
frang_limits {
    http_methods GET HEAD;
    http_uri_len 1000;
    # The idle-memory stage holds 2000 connections from one address (default limit 1000).
    concurrent_tcp_connections 0;
}
block_action attack reply;
block_action error reply;
tls_match_any_server_name;
vhost guest.test {
    tls_certificate $S2/cert.pem;
    tls_certificate_key $S2/key.pem;
    tls_tickets secret="ktls-vm stage 2" lifetime=7200;
    proxy_pass default;
}
cache 1;
cache_fulfill * *;
http_chain {
    -> guest.test;
}
worker_threads 1;
# The idle stage's first connection waits for all the others to open (over a minute on a
# loaded host): the default 75 s keep-alive timeout must not cut it.
keepalive_timeout 600;
tls_ktls $2;
stats_listen $STATS;
CONF
}

# start_proxy <auto|on|user|off> <label>: PROXY_PID set once /metrics answers; 1 if it never did.
start_proxy() {
  write_conf "$S2/proxy-$2.conf" "$1"
  s2_start "$S2/proxy-$2.log" /bin/proxy -c "$S2/proxy-$2.conf"
  PROXY_PID=$LAST_PID
  i=0
  while [ $i -lt 100 ]; do
    if ! alive "$PROXY_PID"; then break; fi
    metrics | grep -q '^ktls_proxy_' && return 0
    sleep 0.1
    i=$((i + 1))
  done
  echo "   proxy ($2) did not come up:"
  sed 's/^/   | /' "$S2/proxy-$2.log"
  s2_stop "$PROXY_PID"
  PROXY_PID=""
  return 1
}
stop_proxy() {
  s2_stop "$PROXY_PID"
  PROXY_PID=""
}

# expected <len>: the origin's own body of /bytes/len, fetched directly (plain HTTP).
expected() {
  [ -s "$S2/exp.$1" ] || [ "$1" = 0 ] || wget -q -O "$S2/exp.$1" "http://$ORIGIN/bytes/$1"
  echo "$S2/exp.$1"
}

# sclient_get <label> <tls1_2|tls1_3> <cipher> <len> <sess_out|sess_in> <sess file>:
# one `Connection: close` request through openssl s_client; the response must be a 200 whose
# body is byte-for-byte the origin's.
sclient_get() {
  label=$1 ver=$2 cipher=$3 len=$4 sessflag=$5 sess=$6
  if [ "$ver" = tls1_3 ]; then cflag="-ciphersuites $cipher"; else cflag="-cipher $cipher"; fi
  out=$S2/sc.out
  t0=$(uptime_s)
  # shellcheck disable=SC2086
  printf 'GET /bytes/%s HTTP/1.1\r\nHost: guest.test\r\nConnection: close\r\n\r\n' "$len" |
    timeout 60 /bin/openssl s_client -quiet -connect "$HTTPS" -servername guest.test \
      -"$ver" $cflag -"$sessflag" "$sess" >"$out" 2>"$S2/sc.err"
  rc=$?
  took=$(awk -v a="$t0" -v b="$(uptime_s)" 'BEGIN {printf "%.1f", b - a}')
  exp=$(expected "$len")
  size=$(wc -c <"$out")
  hl=$((size - len))
  why=""
  if [ "$rc" != 0 ]; then
    why="s_client rc=$rc after ${took}s: $(grep -v '^depth=\|^verify' "$S2/sc.err" | head -3 | tr '\n' ' ')"
  elif [ "$hl" -le 4 ] || [ "$(head -c 12 "$out")" != "HTTP/1.1 200" ]; then
    why="not a 200 with a $len-byte body ($size bytes: $(head -c 40 "$out" | tr -c '[:print:]' .))"
  elif [ "$(head -c "$hl" "$out" | tail -c 4 | od -An -tx1 | tr -d ' \n')" != 0d0a0d0a ] ||
    ! head -c "$hl" "$out" | grep -qi "^content-length: $len"; then
    why="response head does not end right before $len body bytes"
  elif ! tail -c "$len" "$out" | cmp -s - "$exp"; then
    why="body differs from the origin's ($(tail -c "$len" "$out" | sha256sum | cut -c1-16) vs $(sha256sum <"$exp" | cut -c1-16))"
  fi
  if [ -z "$why" ]; then
    s2_pass "$label" "$len bytes exact (sha256 $(sha256sum <"$exp" | cut -c1-16))"
  else
    s2_fail "$label" "$why"
  fi
}

# run_client <args...>: guest_client suite; its case lines count; its failures are ours.
run_client() {
  timeout 300 /bin/guest_client suite "$@" >"$S2/client.log" 2>&1
  rc=$?
  cat "$S2/client.log"
  n=$(grep -c '^case ' "$S2/client.log")
  TOTAL_CASES=$((TOTAL_CASES + n))
  if grep -q '^case .* FAIL' "$S2/client.log" || [ "$rc" != 0 ]; then
    note_failure "stage 2 guest_client $* (rc=$rc): $(grep '^case .* FAIL' "$S2/client.log" | head -2 | tr '\n' ' ')"
  fi
}

# quiet_cpu <label>: the proxy, with nothing to do, must not burn CPU (busy loop check).
quiet_cpu() {
  sleep 1
  t0=$(cpu_ticks "$PROXY_PID")
  sleep 3
  t1=$(cpu_ticks "$PROXY_PID")
  d=$((${t1:-0} - ${t0:-0}))
  s2_check "$1" "$d" -le 10 -- "proxy used $d ticks (1/100 s) of CPU in 3 s idle (limit 10)"
}

# proxy_sane <label>: nothing counted as an error, every connection closed.
proxy_sane() {
  i=0
  while [ "$(metric_sum ktls_proxy_connections_open)" != 0 ] && [ $i -lt 30 ]; do
    sleep 0.1
    i=$((i + 1))
  done
  m=$(metrics)
  open=$(echo "$m" | grep '^ktls_proxy_connections_open' | awk '{s += $2} END {print s + 0}')
  panics=$(echo "$m" | grep '^ktls_proxy_panics_total' | awk '{print $2}')
  perr=$(echo "$m" | grep '^ktls_proxy_parse_errors_total' | awk '{print $2}')
  hsf=$(echo "$m" | grep -F 'ktls_proxy_tls_handshakes_total{result="failed"}' | awk '{print $2}')
  r5=$(echo "$m" | grep -F 'ktls_proxy_responses_total{class="5xx"}' | awk '{print $2}')
  r4=$(echo "$m" | grep -F 'ktls_proxy_responses_total{class="4xx"}' | awk '{print $2}')
  alive=yes
  alive "$PROXY_PID" || alive=no
  s2_check "$1" "$alive:${open:-x}:${panics:-x}:${perr:-x}:${hsf:-x}:${r5:-x}:${r4:-x}" = yes:0:0:0:0:0:0 -- \
    "alive=$alive open=$open panics=$panics parse_errors=$perr handshakes_failed=$hsf 4xx=$r4 5xx=$r5"
}

S2_SUITES="1.2:tls1_2:ECDHE-ECDSA-AES128-GCM-SHA256
1.2:tls1_2:ECDHE-ECDSA-AES256-GCM-SHA384
1.2:tls1_2:ECDHE-ECDSA-CHACHA20-POLY1305
1.3:tls1_3:TLS_AES_128_GCM_SHA256
1.3:tls1_3:TLS_AES_256_GCM_SHA384
1.3:tls1_3:TLS_CHACHA20_POLY1305_SHA256"
BIG=5000000

# The three record paths a TLS connection can take, as the metrics name them.
S2_PATHS="ktls_both records userspace"
path_count() { metric "ktls_proxy_tls_connections_total{path=\"$1\"}"; }

# suite_round <expect: ktls_both|records|userspace>: every suite, full and resumed, through
# the proxy; every connection must take the expected path.
suite_round() {
  expect=$1
  for s in $S2_SUITES; do
    v=${s%%:*}
    rest=${s#*:}
    sv=${rest%%:*}
    cipher=${rest#*:}
    before=""
    for p in $S2_PATHS; do before="$before $(path_count "$p")"; done
    res0=$(metric 'ktls_proxy_tls_handshakes_total{result="resumed"}')
    conns=1
    ku=skip
    if [ "$v" = 1.3 ]; then
      conns=2
      # kernel 6.1 cannot rekey: the proxy must close; both user-space layers follow.
      if [ "$expect" = ktls_both ]; then ku=close; else ku=follow; fi
    fi
    # guest_client: 10 B, 26 KB, 5 MB, 100 keep-alive requests, close_notify, KeyUpdate.
    run_client "$HTTPS" "$v" "$cipher" --big "$BIG" --keepalive 100 --keyupdate "$ku"
    # s_client: a full handshake saving the session, then two resumed connections.
    sess=$S2/sess.$cipher
    rm -f "$sess"
    sclient_get "s_client $sv $cipher full" "$sv" "$cipher" "$BIG" sess_out "$sess"
    sclient_get "s_client $sv $cipher resumed" "$sv" "$cipher" 26000 sess_in "$sess"
    sclient_get "s_client $sv $cipher resumed" "$sv" "$cipher" 10 sess_in "$sess"
    conns=$((conns + 3))
    res=$(($(metric 'ktls_proxy_tls_handshakes_total{result="resumed"}') - res0))
    s2_check "tickets $sv $cipher" "$res" -eq 2 -- "$res of 2 s_client reconnections resumed"
    got="" want="" said=""
    set -- $before
    for p in $S2_PATHS; do
      d=$(($(path_count "$p") - $1))
      shift
      got="$got$d:"
      if [ "$p" = "$expect" ]; then want="$want$conns:"; else want="${want}0:"; fi
      said="$said $p +$d"
      [ "$p" = ktls_both ] && [ "$expect" = ktls_both ] && S2_KTLS=$((S2_KTLS + d))
    done
    s2_check "path $sv $cipher" "$got" = "$want" -- "expected $expect for $conns connections:$said"
  done
}

# h2_round <expect: ktls_both|records|userspace> <version:cipher>...: HTTP/2 (ALPN h2) through
# the proxy on one connection per suite, 53 concurrent streams (10 B, 26 KB, BIG and 50 more), every byte
# checked by guest_h2; the connection must take the expected path.
h2_round() {
  expect=$1
  shift
  for s in "$@"; do
    v=${s%%:*}
    cipher=${s#*:}
    before=$(path_count "$expect")
    timeout 300 /bin/guest_h2 "$HTTPS" "$v" "$cipher" --big "$BIG" >"$S2/h2.log" 2>&1
    rc=$?
    cat "$S2/h2.log"
    TOTAL_CASES=$((TOTAL_CASES + $(grep -c '^case ' "$S2/h2.log")))
    if grep -q '^case .* FAIL' "$S2/h2.log" || [ "$rc" != 0 ]; then
      note_failure "stage 2 guest_h2 $v $cipher (rc=$rc): $(grep '^case .* FAIL' "$S2/h2.log" | head -2 | tr '\n' ' ')"
    fi
    d=$(($(path_count "$expect") - before))
    s2_check "h2 path $v $cipher" "$d" -eq 1 -- "expected 1 connection on $expect, saw +$d"
    [ "$expect" = ktls_both ] && S2_KTLS=$((S2_KTLS + d))
  done
}

# idle_memory <auto|off> <label>: VmRSS growth of the proxy per idle TLS 1.3 connection.
IDLE_CONNS=${IDLE_CONNS:-2000}
IDLE_RETRY=""
idle_memory() {
  IDLE_BYTES=""
  IDLE_SLAB=""
  start_proxy "$1" "idle-$2" || {
    s2_fail "idle memory $2" "proxy did not start"
    return
  }
  # Warm-up: the proxy's one-time allocations (upstream connection, cache entry, pools).
  rm -f "$S2/release"
  touch "$S2/release"
  timeout 60 /bin/guest_client hold "$HTTPS" --conns 10 --release "$S2/release" >/dev/null 2>&1
  rm -f "$S2/release"
  sleep 1
  base=$(rss_kb "$PROXY_PID")
  slab0=$(awk '/^Slab:/ {print $2}' /proc/meminfo)
  s2_start "$S2/hold.log" /bin/guest_client hold "$HTTPS" --conns "$IDLE_CONNS" --release "$S2/release" --timeout 240
  hold_pid=$LAST_PID
  i=0
  while ! grep -q '^held ' "$S2/hold.log" && alive "$hold_pid" && [ $i -lt 1800 ]; do
    sleep 0.1
    i=$((i + 1))
  done
  sleep 1
  held=$(rss_kb "$PROXY_PID")
  slab1=$(awk '/^Slab:/ {print $2}' /proc/meminfo)
  open=$(metric_sum ktls_proxy_connections_open)
  S2_DIAG="listeners: $(netstat -ltnp 2>/dev/null | grep ':8443 ' | awk '{print $NF}' | tr '\n' ' ') established to 8443: $(netstat -tn 2>/dev/null | grep -c '127.0.0.1:8443 .*ESTABLISHED') processes: $(ps -o pid,comm 2>/dev/null | grep -E 'proxy|guest_' | tr -s ' ' | tr '\n' ';')"
  path=$(metrics | grep '^ktls_proxy_tls_connections_total' | awk '$2 > 0 {print $1 "=" $2}' | sed 's/ktls_proxy_tls_connections_total//' | tr '\n' ' ')
  touch "$S2/release"
  i=0
  while alive "$hold_pid" && [ $i -lt 300 ]; do
    sleep 0.1
    i=$((i + 1))
  done
  s2_stop "$hold_pid"
  cat "$S2/hold.log"
  if grep -q '^released ' "$S2/hold.log" && [ "${open:-0}" -ge "$IDLE_CONNS" ] && [ -n "$base" ] && [ -n "$held" ]; then
    IDLE_BYTES=$(((held - base) * 1024 / IDLE_CONNS))
    # Kernel slab of the whole guest (both ends' sockets, and the kTLS state when offloaded).
    IDLE_SLAB=$(((slab1 - slab0) * 1024 / IDLE_CONNS))
    s2_pass "idle memory $2" "$IDLE_CONNS idle connections: VmRSS ${base} kB -> ${held} kB, $IDLE_BYTES bytes each; kernel slab +$IDLE_SLAB bytes per connection (both ends); $path"
  else
    if [ -z "$IDLE_RETRY" ]; then
      # Seen on loaded hosts (2 of 4 runs on 2026-12-05, and in earlier sessions): most held
      # connections were found closed before the measurement, every close counted as the
      # client's, while the client still held them; the cause is not found yet. A proxy that
      # really loses idle connections fails both measurements.
      echo "case idle memory $2: hold failed (open=${open:-?} of $IDLE_CONNS); measuring once more"
      stop_proxy
      IDLE_RETRY=1
      idle_memory "$1" "$2"
      IDLE_RETRY=""
      return
    fi
    s2_fail "idle memory $2" "hold failed (open=$open rss ${base:-?} -> ${held:-?} kB): $(tail -2 "$S2/hold.log" | tr '\n' ' ')"
    echo "   at the measurement: $S2_DIAG"
    metrics | grep -E '^ktls_proxy_(connections|tls_|requests|panics)' | sed 's/^/   | /'
    sed 's/^/   | /' "$S2/proxy-idle-$2.log" | tail -20
  fi
  stop_proxy
}

block_module_autoload() { echo /bin/false >/proc/sys/kernel/modprobe; }
allow_module_autoload() { echo /sbin/modprobe >/proc/sys/kernel/modprobe; }
unload_tls() {
  block_module_autoload
  tries=0
  while grep -q '^tls ' /proc/modules; do
    rmmod tls 2>/dev/null && return 0
    tries=$((tries + 1))
    [ "$tries" -ge 20 ] && return 1
    sleep 0.5
  done
  return 0
}

stage2_proxy() {
  if [ ! -x /bin/proxy ]; then
    echo "== stage 2: SKIP (no proxy binary in the guest)"
    return
  fi
  for b in guest_origin guest_client guest_h2 guest_sendbench openssl; do
    if [ ! -x "/bin/$b" ]; then
      note_failure "stage 2: /bin/$b missing from the guest"
      return
    fi
  done
  if ! grep -q '^tls ' /proc/modules; then
    note_failure "stage 2: the tls module is not loaded"
    return
  fi
  mkdir -p "$S2"
  ulimit -n 16384
  # qemu TCG emulates every instruction (~1-2 MiB/s of TLS, handshakes ~10x slower than UML):
  # smaller sizes there keep the run inside KTLS_VM_TIMEOUT. UML's command line has con0=.
  if ! grep -q 'con0=' /proc/cmdline; then
    BIG=1000000 IDLE_CONNS=500 SENDBENCH_MB=4
    echo "   (qemu guest: 1 MB bodies, $IDLE_CONNS idle connections, 4 MB per bench round)"
  fi
  if [ -s /etc/ktls-vm/cert.pem ]; then
    cp /etc/ktls-vm/cert.pem /etc/ktls-vm/key.pem "$S2/"
  else
    /bin/openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
      -subj /CN=guest.test -keyout "$S2/key.pem" -out "$S2/cert.pem" 2>/dev/null
  fi
  S2_KTLS=0
  s2_start "$S2/origin.log" /bin/guest_origin --listen "$ORIGIN"
  ORIGIN_PID=$LAST_PID
  i=0
  until wget -q -O /dev/null "http://$ORIGIN/bytes/1" 2>/dev/null || [ $i -ge 50 ]; do
    sleep 0.1
    i=$((i + 1))
  done

  echo "== stage 2a: proxy, tls_ktls auto, tls module loaded [$(uptime_s)]"
  stat0_tx=$(tls_stat TlsTxSw)
  stat0_rx=$(tls_stat TlsRxSw)
  stat0_de=$(tls_stat TlsDecryptError)
  if start_proxy auto ktls; then
    grep 'kTLS:' "$S2/proxy-ktls.log" | sed 's/^/   /'
    s2_check "startup line (auto, module)" "$(grep -c 'kTLS: available' "$S2/proxy-ktls.log")" -eq 1 -- \
      "$(grep 'kTLS:' "$S2/proxy-ktls.log" | head -1)"
    suite_round ktls_both
    h2_round ktls_both 1.3:TLS_AES_128_GCM_SHA256 1.2:ECDHE-ECDSA-AES256-GCM-SHA384
    quiet_cpu "no busy loop after close_notify/KeyUpdate (kTLS)"
    proxy_sane "no errors counted, all closed (kTLS)"
    fb=$(metric_sum ktls_proxy_ktls_fallbacks_total)
    s2_check "no fallbacks (kTLS)" "$fb" -eq 0 -- "ktls_fallbacks_total $fb"
    dtx=$(($(tls_stat TlsTxSw) - stat0_tx))
    drx=$(($(tls_stat TlsRxSw) - stat0_rx))
    dde=$(($(tls_stat TlsDecryptError) - stat0_de))
    s2_check "tls_stat" "$dtx:$drx" = "$S2_KTLS:$S2_KTLS" -- \
      "TlsTxSw +$dtx TlsRxSw +$drx for $S2_KTLS kTLS connections, TlsDecryptError +$dde"
    stop_proxy
    cur="$(tls_stat TlsCurrTxSw):$(tls_stat TlsCurrRxSw)"
    s2_check "kTLS sockets released" "$cur" = 0:0 -- "TlsCurrTxSw:TlsCurrRxSw=$cur after the proxy stopped"
    TOTAL_KTLS=$((TOTAL_KTLS + S2_KTLS))
  else
    s2_fail "proxy start (auto)" "see its log above"
  fi

  echo "== stage 2a': proxy, tls_ktls user (the proxy's record layer), tls module loaded [$(uptime_s)]"
  # The other backend in the same guest, with the kernel able to take the records: none of
  # these connections may touch kernel TLS.
  stat0_tx=$(tls_stat TlsTxSw)
  stat0_rx=$(tls_stat TlsRxSw)
  if start_proxy user records; then
    grep 'kTLS:' "$S2/proxy-records.log" | sed 's/^/   /'
    s2_check "startup line (user)" "$(grep -c 'kTLS: user' "$S2/proxy-records.log")" -eq 1 -- \
      "$(grep 'kTLS:' "$S2/proxy-records.log" | head -1)"
    S2_SUITES_ALL=$S2_SUITES
    S2_SUITES="1.2:tls1_2:ECDHE-ECDSA-CHACHA20-POLY1305
1.3:tls1_3:TLS_AES_256_GCM_SHA384
1.3:tls1_3:TLS_CHACHA20_POLY1305_SHA256"
    suite_round records
    S2_SUITES=$S2_SUITES_ALL
    h2_round records 1.3:TLS_CHACHA20_POLY1305_SHA256
    quiet_cpu "no busy loop after close_notify/KeyUpdate (records)"
    proxy_sane "no errors counted, all closed (records)"
    uc=$(metric 'ktls_proxy_ktls_fallbacks_total{reason="user_chosen"}')
    rc_=$(path_count records)
    s2_check "fallback reason (user)" "$uc" -eq "$rc_" -- "user_chosen=$uc for $rc_ records connections"
    dtx=$(($(tls_stat TlsTxSw) - stat0_tx))
    drx=$(($(tls_stat TlsRxSw) - stat0_rx))
    s2_check "no kernel TLS (records)" "$dtx:$drx" = "0:0" -- "TlsTxSw +$dtx TlsRxSw +$drx"
    stop_proxy
  else
    s2_fail "proxy start (user)" "see its log above"
  fi

  echo "== stage 2b: idle memory, $IDLE_CONNS TLS 1.3 connections [$(uptime_s)]"
  idle_memory auto ktls
  ktls_bytes=$IDLE_BYTES ktls_slab=$IDLE_SLAB
  idle_memory off userspace
  user_bytes=$IDLE_BYTES user_slab=$IDLE_SLAB
  idle_memory user records
  records_bytes=$IDLE_BYTES records_slab=$IDLE_SLAB
  echo "idle_conn_bytes userspace=${user_bytes:-?} ktls=${ktls_bytes:-?} records=${records_bytes:-?}"
  echo "idle_conn_kernel_slab_bytes userspace=${user_slab:-?} ktls=${ktls_slab:-?} records=${records_slab:-?} (guest-wide, client and proxy sockets)"
  if [ -n "$user_bytes" ] && [ -n "$ktls_bytes" ]; then
    goal="ktls<=userspace/3: $([ $((ktls_bytes * 3)) -le "$user_bytes" ] && echo met || echo NOT met);"
    goal="$goal userspace<=1024: $([ "$user_bytes" -le 1024 ] && echo met || echo NOT met)"
    echo "idle_conn_goal $goal"
  fi

  echo "== stage 2c: sendfile vs writev on a kTLS socket [$(uptime_s)]"
  # Meanwhile (it mostly sleeps), on a proxy of its own: a reused connection slot must not
  # inherit the previous connection's timers.
  slot_pid=""
  main_https=$HTTPS main_stats=$STATS
  HTTPS=127.0.0.1:8453 STATS=127.0.0.1:9101
  if start_proxy auto slot; then
    slot_proxy=$PROXY_PID
    s2_start "$S2/slot.log" /bin/guest_client slot-reuse "$HTTPS"
    slot_pid=$LAST_PID
  else
    s2_fail "proxy start (slot reuse)" "see its log above"
  fi
  HTTPS=$main_https STATS=$main_stats
  timeout 240 /bin/guest_sendbench --mb-per-round "${SENDBENCH_MB:-16}" --rounds 3 >"$S2/bench.log" 2>&1
  rc=$?
  cat "$S2/bench.log"
  if [ -n "$slot_pid" ]; then
    i=0
    while alive "$slot_pid" && [ $i -lt 400 ]; do
      sleep 0.1
      i=$((i + 1))
    done
    s2_stop "$slot_pid"
    PROXY_PID=$slot_proxy
    stop_proxy
    cat "$S2/slot.log"
    TOTAL_CASES=$((TOTAL_CASES + 1))
    if ! grep -q '^case .* PASS' "$S2/slot.log"; then
      note_failure "stage 2 slot reuse: $(grep '^case' "$S2/slot.log" | sed 's/.*:: //')"
    fi
  fi
  if [ "$rc" = 0 ] && grep -q '^sendbench: PASS' "$S2/bench.log"; then
    s2_pass "sendfile vs writev" "$(grep '^sendbench_summary' "$S2/bench.log" | cut -d' ' -f2-)"
  else
    s2_fail "sendfile vs writev" "rc=$rc $(grep '^sendbench: FAIL' "$S2/bench.log")"
  fi

  echo "== stage 2d: fallback, tls module removed [$(uptime_s)]"
  if unload_tls; then
    if start_proxy auto fallback; then
      grep 'kTLS:' "$S2/proxy-fallback.log" | sed 's/^/   /'
      s2_check "startup line (auto, no module)" "$(grep -c 'kTLS: unavailable' "$S2/proxy-fallback.log")" -eq 1 -- \
        "$(grep 'kTLS:' "$S2/proxy-fallback.log" | head -1)"
      S2_SUITES_ALL=$S2_SUITES
      S2_SUITES="1.2:tls1_2:ECDHE-ECDSA-AES256-GCM-SHA384
1.3:tls1_3:TLS_AES_128_GCM_SHA256
1.3:tls1_3:TLS_CHACHA20_POLY1305_SHA256"
      suite_round records
      S2_SUITES=$S2_SUITES_ALL
      nks=$(metric 'ktls_proxy_ktls_fallbacks_total{reason="no_kernel_support"}')
      rec=$(path_count records)
      s2_check "fallback reason" "$nks" -eq "$rec" -- "no_kernel_support=$nks for $rec records connections"
      quiet_cpu "no busy loop after close_notify (user space)"
      proxy_sane "no errors counted, all closed (user space)"
      stop_proxy
    else
      s2_fail "proxy start (auto, no module)" "see its log above"
    fi
    write_conf "$S2/proxy-on.conf" on
    timeout 20 /bin/proxy -c "$S2/proxy-on.conf" >"$S2/proxy-on.log" 2>&1
    rc=$?
    sed 's/^/   | /' "$S2/proxy-on.log"
    s2_check "tls_ktls on refuses to start" "$rc:$(grep -ci 'tls_ktls on' "$S2/proxy-on.log")" = "1:1" -- \
      "exit $rc, $(grep -i 'ktls' "$S2/proxy-on.log" | head -1)"
  else
    s2_fail "rmmod tls" "module still in use"
  fi
  allow_module_autoload
  modprobe tls 2>/dev/null
  s2_stop "$ORIGIN_PID"
  for p in $S2_PIDS; do s2_stop "$p"; done
  rm -rf "$S2"
}

echo "guest: tcp_available_ulp=$(cat /proc/sys/net/ipv4/tcp_available_ulp 2>/dev/null)"
stage1_with_module
stage1_without_module
stage2_proxy
echo "guest: tls_stat $(tr -s ' \t' '=' </proc/net/tls_stat 2>/dev/null | tr '\n' ' ')"
if [ -z "$FAILURES" ]; then
  echo "guest: PASS cases=$TOTAL_CASES ktls_both=$TOTAL_KTLS"
  exit 0
fi
echo "guest: FAIL $FAILURES (cases=$TOTAL_CASES ktls_both=$TOTAL_KTLS)"
exit 1
