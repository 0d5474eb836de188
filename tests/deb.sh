#!/usr/bin/env bash
# The Debian packages, built and checked as an operator would use them:
#  1. cargo-deb builds ktls-proxy_<ver>_<arch>.deb and ktls-proxy-tools_<ver>_<arch>.deb
#     (etc/debian/build-deb.sh), and lintian finds no error in either;
#  2. dpkg -x into a scratch root: binaries, man pages, docs, the unit (systemd-analyze
#     verify), conffiles, logrotate snippet, modules-load.d, maintainer scripts;
#  3. the packaged make-cert and the packaged binary against the packaged configuration
#     (moved onto loopback ports and the scratch root): -t, serve a request through the
#     packaged origin, -s reload, log moved + -s reopen, -s quit;
#  4. a real `dpkg -i` where the machine allows it (root, and CI=true or
#     KTLS_PROXY_DEB_INSTALL=1): postinst's user and certificate, `proxy -t` of
#     /etc/ktls-proxy as the service user, then `dpkg --purge`.
# Usage: tests/deb.sh
set -euo pipefail
cd "$(dirname "$0")/.."
fail() { echo "deb.sh: FAIL: $*" >&2; exit 1; }

if ! command -v cargo-deb >/dev/null; then
    start=$(date +%s)
    echo "deb.sh: installing cargo-deb (cargo install cargo-deb --locked)"
    cargo install cargo-deb --locked --quiet
    echo "deb.sh: cargo-deb installed in $(( $(date +%s) - start )) s"
fi
built="$(etc/debian/build-deb.sh --fast)"
deb="$(echo "$built" | tail -n 1)"
tools="$(echo "$built" | tail -n 2 | head -n 1)"
[ -f "$deb" ] || fail "no package built: $deb"
[ -f "$tools" ] || fail "no tools package built: $tools"
echo "deb.sh: built $deb ($(du -h "$deb" | cut -f1)) and $tools ($(du -h "$tools" | cut -f1))"
if command -v lintian >/dev/null; then
    for p in "$deb" "$tools"; do
        report="$(lintian "$p" 2>&1 | grep -v 'running with root privileges' || true)"
        [ -z "$report" ] || echo "$report" | sed 's/^/deb.sh: lintian: /'
        ! echo "$report" | grep -q '^E: ' || fail "lintian reports errors in $p"
    done
    echo "deb.sh: lintian: no errors"
else
    fail "lintian is not installed (etc/need-packages.sh lintian)"
fi

scratch="$(mktemp -d /tmp/ktls-deb.XXXXXX)"
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    rm -rf "$scratch"
}
trap cleanup EXIT

# --- 2. contents
dpkg-deb -f "$deb" Package | grep -qx ktls-proxy || fail "package name"
dpkg-deb -f "$tools" Package | grep -qx ktls-proxy-tools || fail "tools package name"
dpkg-deb -f "$deb" Depends | grep -q adduser || fail "Depends lacks adduser"
for name in proxy tls-perf http-perf origin; do
    dpkg-deb -c "$deb" | grep -q "/usr/bin/$name\$" && fail "ktls-proxy installs /usr/bin/$name"
done
dpkg -x "$deb" "$scratch/root"
dpkg -x "$tools" "$scratch/root"
dpkg-deb -e "$deb" "$scratch/DEBIAN"
r="$scratch/root"
for f in usr/bin/ktls-proxy usr/bin/tls-perf usr/bin/http-perf usr/bin/origin \
    usr/share/man/man1/ktls-proxy.1.gz usr/share/man/man1/tls-perf.1.gz \
    usr/share/man/man1/http-perf.1.gz usr/share/man/man1/origin.1.gz \
    usr/share/doc/ktls-proxy/changelog.Debian.gz usr/share/doc/ktls-proxy-tools/changelog.Debian.gz \
    etc/ktls-proxy/ktls-proxy.conf etc/logrotate.d/ktls-proxy \
    usr/lib/modules-load.d/ktls-proxy.conf \
    usr/share/ktls-proxy/make-cert usr/share/ktls-proxy/grafana/ktls-proxy.json \
    usr/share/doc/ktls-proxy/OPERATIONS.md usr/share/doc/ktls-proxy/copyright; do
    [ -e "$r/$f" ] || fail "missing /$f"
done
grep -qx /etc/ktls-proxy/ktls-proxy.conf "$scratch/DEBIAN/conffiles" || fail "config is not a conffile"
grep -qx /etc/logrotate.d/ktls-proxy "$scratch/DEBIAN/conffiles" || fail "logrotate snippet is not a conffile"
unit="$(find "$r/lib/systemd/system" "$r/usr/lib/systemd/system" -name ktls-proxy.service 2>/dev/null | head -n 1 || true)"
[ -n "$unit" ] || fail "missing ktls-proxy.service"
for line in Type=notify 'ExecReload=/bin/kill -HUP $MAINPID' LimitNOFILE=1048576 \
    PIDFile=/run/ktls-proxy/ktls-proxy.pid; do
    grep -qxF "$line" "$unit" || fail "unit lacks $line"
done
grep -q 'deb-systemd-helper' "$scratch/DEBIAN/postinst" || fail "postinst does not enable the unit"
grep -q make-cert "$scratch/DEBIAN/postinst" || fail "postinst does not make a certificate"
grep -q 'rm -rf /etc/ktls-proxy/certs' "$scratch/DEBIAN/postrm" && fail "postrm deletes the operator's certificates"
if command -v systemd-analyze >/dev/null; then
    # The unit's syntax and settings; the packaged paths (/usr/bin/ktls-proxy, man:ktls-proxy(1)) are
    # not installed on this host, so those two complaints are expected.
    out="$(systemd-analyze verify "$unit" 2>&1 || true)"
    if echo "$out" | grep -v -e 'is not executable' -e "Command 'man " | grep -q .; then
        echo "$out" >&2; fail "systemd-analyze verify found problems in the unit"
    fi
fi
zcat "$r/usr/share/man/man1/ktls-proxy.1.gz" | grep -q '^\.TH ktls-proxy 1' || fail "ktls-proxy.1 is not a man page"
for page in ktls-proxy tls-perf http-perf origin; do
    zcat "$r/usr/share/man/man1/$page.1.gz" | grep -q '^\.SH EXAMPLES' || fail "$page.1 has no examples"
done
file "$r/usr/bin/ktls-proxy" | grep -q ', stripped' || fail "ktls-proxy is not stripped"
# The package is the default build: AWS-LC inside the binary (README, "TLS library").
"$r/usr/bin/ktls-proxy" --version | grep -q '^TLS library: AWS-LC ' || fail "ktls-proxy --version: not the AWS-LC build"

# --- 3. the packaged binary and configuration, on loopback
"$r/usr/share/ktls-proxy/make-cert" "$r/etc/ktls-proxy/certs" >/dev/null
[ -s "$r/etc/ktls-proxy/certs/ktls-proxy.key" ] || fail "make-cert made no key"
before="$(sha256sum "$r/etc/ktls-proxy/certs/ktls-proxy.key")"
"$r/usr/share/ktls-proxy/make-cert" "$r/etc/ktls-proxy/certs" >/dev/null
[ "$before" = "$(sha256sum "$r/etc/ktls-proxy/certs/ktls-proxy.key")" ] || fail "make-cert replaced an existing key"
base=$((20000 + RANDOM % 20000))
https=$base http=$((base + 1)) stats=$((base + 2)) backend=$((base + 3))
mkdir -p "$r/run/ktls-proxy" "$r/var/log/ktls-proxy"
conf="$scratch/ktls-proxy.conf"
sed -e "s#/etc/ktls-proxy/#$r/etc/ktls-proxy/#g" -e "s#/run/ktls-proxy/#$r/run/ktls-proxy/#g" \
    -e "s#/var/log/ktls-proxy/#$r/var/log/ktls-proxy/#g" \
    -e "s#^listen 443 #listen 127.0.0.1:$https #" -e "s#^listen 80;#listen 127.0.0.1:$http;#" \
    -e "s#stats_listen 127.0.0.1:9100#stats_listen 127.0.0.1:$stats#" \
    -e "s#server 127.0.0.1:8000#server 127.0.0.1:$backend#" \
    "$r/etc/ktls-proxy/ktls-proxy.conf" > "$conf"
"$r/usr/bin/ktls-proxy" -t -c "$conf" >/dev/null || fail "proxy -t of the packaged configuration"
"$r/usr/bin/origin" --listen "127.0.0.1:$backend" >"$scratch/origin.log" 2>&1 &
pids+=($!)
"$r/usr/bin/ktls-proxy" -c "$conf" >"$scratch/proxy.out" 2>"$scratch/proxy.err" &
proxy_pid=$!
pids+=($proxy_pid)
wait_for() { # FILE TEXT: up to 20 s
    for _ in $(seq 200); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
    cat "$scratch/proxy.err" >&2; fail "no '$2' in $1"
}
wait_for "$scratch/proxy.err" "serving with"
[ "$(cat "$r/run/ktls-proxy/ktls-proxy.pid")" = "$proxy_pid" ] || fail "pid file"
code="$(curl -sk --http1.1 -o /dev/null -w '%{http_code}' --max-time 10 \
    --resolve "localhost:$https:127.0.0.1" "https://localhost:$https/")"
[ "$code" = 200 ] || fail "HTTPS through the packaged proxy answered $code"
# By the address (an IP literal Host: the packaged file turns strict Host checking off), over
# HTTP/2 (the packaged listener offers h2).
got="$(curl -sk -o /dev/null -w '%{http_code} %{http_version}' --http2 --max-time 10 "https://127.0.0.1:$https/")"
[ "$got" = "200 2" ] || fail "HTTPS by address over HTTP/2 through the packaged proxy: $got"
log="$r/var/log/ktls-proxy/access.log"
wait_for "$log" '"GET / HTTP/1.1" 200'
"$r/usr/bin/ktls-proxy" -c "$conf" -s reload
wait_for "$scratch/proxy.err" "reloaded"
mv "$log" "$log.1"
"$r/usr/bin/ktls-proxy" -c "$conf" -s reopen
wait_for "$scratch/proxy.err" "access logs reopened"
[ -f "$log" ] || fail "reopen did not recreate the access log"
"$r/usr/bin/ktls-proxy" -c "$conf" -s quit
for _ in $(seq 200); do kill -0 "$proxy_pid" 2>/dev/null || break; sleep 0.1; done
kill -0 "$proxy_pid" 2>/dev/null && fail "proxy still running after -s quit"
wait "$proxy_pid" || fail "proxy exited with an error after -s quit"
echo "deb.sh: the packaged binary served the packaged configuration (reload, reopen, quit)"

# --- 4. a real installation
if [ "$(id -u)" = 0 ] && { [ "${CI:-}" = true ] || [ -n "${KTLS_PROXY_DEB_INSTALL:-}" ]; }; then
    dpkg -s ktls-proxy >/dev/null 2>&1 && fail "ktls-proxy is already installed here; not touching it"
    dpkg -i "$deb" "$tools" >/dev/null || fail "dpkg -i"
    getent passwd ktls-proxy >/dev/null || fail "postinst made no ktls-proxy user"
    [ "$(stat -c %G:%a /etc/ktls-proxy/certs/ktls-proxy.key)" = ktls-proxy:640 ] \
        || fail "key not readable by the service group only"
    runuser -u ktls-proxy -- /usr/bin/ktls-proxy -t -c /etc/ktls-proxy/ktls-proxy.conf >/dev/null \
        || fail "proxy -t of /etc/ktls-proxy as the service user"
    [ -d /var/log/ktls-proxy ] || fail "no /var/log/ktls-proxy"
    dpkg --purge ktls-proxy ktls-proxy-tools >/dev/null || fail "dpkg --purge"
    # Certificates are the operator's: purge keeps them (and so their directory).
    [ -s /etc/ktls-proxy/certs/ktls-proxy.key ] || fail "purge deleted /etc/ktls-proxy/certs"
    [ ! -e /var/log/ktls-proxy ] || fail "purge left /var/log/ktls-proxy"
    rm -rf /etc/ktls-proxy
    ! getent passwd ktls-proxy >/dev/null || fail "purge left the ktls-proxy user"
    echo "deb.sh: dpkg -i, postinst, proxy -t as the service user, dpkg --purge: ok"
else
    echo "deb.sh: real dpkg -i skipped (needs root and CI=true or KTLS_PROXY_DEB_INSTALL=1)"
fi
echo "deb.sh: 1 passed, 0 failed"
