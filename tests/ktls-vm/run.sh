#!/bin/bash
# tests/ktls-vm/run.sh — test the kTLS path for real, inside a guest kernel that has kTLS.
#
# The host kernel may lack the `tls` module (this project's machines do), so this boots
# Debian's 6.1 kernel as user-mode-linux (first choice where it boots, ~7 s) or under qemu TCG,
# with an initramfs holding busybox, the project's binaries with their libraries, and the
# tls + crypto modules. Inside, tests/ktls-vm/guest.sh runs the ktls self-test with the
# module (both directions must be offloaded) and without it (fallback must work), then the
# proxy stage (stage 2: the proxy with guest_origin and guest_client, idle memory per
# connection, sendfile vs writev) when a `proxy` binary is present. Whole run ~4 min on UML.
#
# Last line: `ktls-vm: PASS cases=N ktls_both=K`, `ktls-vm: FAIL <why>` (exit 1), or
# `ktls-vm: SKIP <why>` when no guest can be had (exit 0 only with KTLS_VM_ALLOW_SKIP=1).
#
# Environment:
#   KTLS_VM_BIN_DIR     take binaries from here or its examples/ (selftest required; proxy,
#                       guest_origin, guest_client, guest_h2, guest_sendbench for stage 2) instead of
#                       building them
#   KTLS_VM_GUEST       auto (default: uml where a one-second probe boots it, else qemu) | uml |
#                       qemu
#   KTLS_VM_TIMEOUT     seconds the guest may run (default 600)
#   KTLS_VM_CACHE       where downloaded .debs are kept (default <repo>/target/ktls-vm)
#   KTLS_VM_ALLOW_SKIP  1: a missing guest is not a failure
#   KTLS_VM_KEEP        1: keep the temp dir (initramfs, guest log) for inspection
#   CARGO_TARGET_DIR    as for cargo (default <repo>/target)
set -uo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
CACHE=${KTLS_VM_CACHE:-$ROOT/target/ktls-vm}
GUEST_KIND=${KTLS_VM_GUEST:-auto}
TIMEOUT=${KTLS_VM_TIMEOUT:-600}
# Modules the guest loads before the test; TLS_TX/RX allocate AEADs that are modules too.
GUEST_MODULES="tls aesni_intel gcm ccm chacha20poly1305 chacha_x86_64 chacha_generic poly1305_x86_64 poly1305_generic ghash_clmulni_intel ghash_generic"
# Stage 2 (the proxy): the proxy, and the guest's origin, client and sendfile/writev bench.
OPTIONAL_BINS="proxy guest_origin guest_client guest_h2 guest_sendbench"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/ktls-vm.XXXXXX")
GUEST_PID=""
T_START=$(date +%s)

cleanup() {
  if [ -n "$GUEST_PID" ] && kill -0 "$GUEST_PID" 2>/dev/null; then
    kill "$GUEST_PID" 2>/dev/null
    sleep 1
    kill -9 "$GUEST_PID" 2>/dev/null
  fi
  if [ "${KTLS_VM_KEEP:-0}" = 1 ]; then echo "ktls-vm: kept $WORK" >&2; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
trap 'echo "ktls-vm: FAIL interrupted"; exit 1' INT TERM

log() { echo "ktls-vm: $*"; }
fail() { echo "ktls-vm: FAIL $*"; exit 1; }
skip() {
  echo "ktls-vm: SKIP $*"
  if [ "${KTLS_VM_ALLOW_SKIP:-0}" = 1 ]; then exit 0; fi
  exit 1
}

# ---------------------------------------------------------------- packages

mkdir -p "$CACHE/dl" || fail "cannot create $CACHE"
APT_UPDATED=0

# fetch_deb <package>: path of its .deb in the cache, downloading it if needed.
fetch_deb() {
  local pkg=$1 deb
  deb=$(ls "$CACHE/dl/${pkg}_"*.deb 2>/dev/null | head -1)
  if [ -z "$deb" ]; then
    if ! (cd "$CACHE/dl" && apt-get download "$pkg" >/dev/null 2>&1); then
      if [ "$APT_UPDATED" = 0 ]; then
        APT_UPDATED=1
        apt-get update -qq >/dev/null 2>&1 || true
      fi
      (cd "$CACHE/dl" && apt-get download "$pkg" >/dev/null 2>&1) || return 1
    fi
    deb=$(ls "$CACHE/dl/${pkg}_"*.deb 2>/dev/null | head -1)
  fi
  [ -n "$deb" ] && echo "$deb"
}

# unpack_deb <package> <dir>: the package's files under <dir> (kept across runs).
unpack_deb() {
  local deb
  deb=$(fetch_deb "$1") || return 1
  if [ ! -f "$2/.unpacked-$(basename "$deb")" ]; then
    rm -rf "$2" && mkdir -p "$2" && dpkg-deb -x "$deb" "$2" || return 1
    touch "$2/.unpacked-$(basename "$deb")"
  fi
}

command -v dpkg-deb >/dev/null || skip "dpkg-deb not found (needs a Debian-like host)"
command -v apt-get >/dev/null || skip "apt-get not found (needs a Debian-like host)"

# A static busybox for the guest, and for cpio/depmod on the host.
if [ -x /bin/busybox ] && ! ldd /bin/busybox >/dev/null 2>&1; then
  BUSYBOX=/bin/busybox
else
  unpack_deb busybox-static "$CACHE/busybox" || skip "cannot download busybox-static (apt-get)"
  BUSYBOX=$CACHE/busybox/bin/busybox
fi

# ---------------------------------------------------------------- binaries

BIN_STAGE=$WORK/bin
mkdir -p "$BIN_STAGE"
if [ -n "${KTLS_VM_BIN_DIR:-}" ]; then
  SRC=$KTLS_VM_BIN_DIR
  [ -x "$SRC/selftest" ] || [ -x "$SRC/examples/selftest" ] || fail "no selftest in KTLS_VM_BIN_DIR=$SRC"
else
  # On the default TLS library, AWS-LC (ktls has no default of its own; the proxy's is
  # aws-lc). The guest's openssl s_client stays the host's OpenSSL: a peer of the other library.
  log "building release binaries (cargo build --release -p ktls --examples --features aws-lc; -p proxy)"
  (cd "$ROOT" && cargo build --release -p ktls --examples --features aws-lc >"$WORK/build.log" 2>&1 &&
    cargo build --release -p proxy >>"$WORK/build.log" 2>&1) || {
    tail -20 "$WORK/build.log"
    fail "cargo build failed"
  }
  SRC=$TARGET/release
fi
# stage_bin <name>: copies $SRC/<name> or $SRC/examples/<name>; 1 if neither exists.
stage_bin() {
  local candidate
  for candidate in "$SRC/$1" "$SRC/examples/$1"; do
    if [ -x "$candidate" ] && [ -f "$candidate" ]; then
      cp "$candidate" "$BIN_STAGE/$1"
      return 0
    fi
  done
  return 1
}
stage_bin selftest || fail "selftest binary not found under $SRC"
for b in $OPTIONAL_BINS; do stage_bin "$b"; done
# The stage-2 clients: openssl s_client from the host, if it has one.
if command -v openssl >/dev/null; then cp "$(command -v openssl)" "$BIN_STAGE/openssl"; fi
log "binaries: $(ls "$BIN_STAGE" | tr '\n' ' ')"

# ---------------------------------------------------------------- guest kernel

KERNEL_CMD=()
MODROOT=""
GUEST_NAME=""
# UML: one package holds the kernel (an executable) and its modules.
try_uml() {
  unpack_deb user-mode-linux "$CACHE/uml" || return 1
  MODROOT=$CACHE/uml/usr/lib/uml/modules
  [ -x "$CACHE/uml/usr/bin/linux.uml" ] && [ -d "$MODROOT" ] || return 1
  GUEST_NAME="uml $(ls "$MODROOT" | head -1)"
  KERNEL_CMD=("$CACHE/uml/usr/bin/linux.uml" mem=768M "initrd=$WORK/initrd.cpio.gz"
    con=null con0=null,fd:1 quiet panic=-1)
}

# qemu TCG with Debian's 6.1 kernel (KVM on these hosts cannot boot a stock kernel).
try_qemu() {
  if ! command -v qemu-system-x86_64 >/dev/null; then
    apt-get install -y -qq --no-install-recommends qemu-system-x86 >/dev/null 2>&1 || {
      apt-get update -qq >/dev/null 2>&1
      apt-get install -y -qq --no-install-recommends qemu-system-x86 >/dev/null 2>&1
    } || return 1
  fi
  local pkgs pkg
  pkgs=$(apt-cache search --names-only '^linux-image-6\.1\.0-[0-9]+-amd64-unsigned$' | awk '{print $1}' | sort -V -r)
  for pkg in $pkgs; do
    if unpack_deb "$pkg" "$CACHE/qemu-kernel"; then break; fi
  done
  MODROOT=$CACHE/qemu-kernel/lib/modules
  local vmlinuz
  vmlinuz=$(ls "$CACHE"/qemu-kernel/boot/vmlinuz-* 2>/dev/null | head -1)
  [ -n "$vmlinuz" ] && [ -d "$MODROOT" ] || return 1
  GUEST_NAME="qemu-tcg $(ls "$MODROOT" | head -1)"
  KERNEL_CMD=(qemu-system-x86_64 -accel tcg -cpu max -m 1024 -smp 2 -kernel "$vmlinuz"
    -initrd "$WORK/initrd.cpio.gz" -append "console=ttyS0 quiet panic=-1"
    -nographic -no-reboot -net none)
}

# probe_uml: boots UML with an init that only prints a line, about a second. UML restores the
# guest's FPU state with ptrace; where the host CPU's XSAVE area is larger than UML 6.1 handles
# (seen on Xeons with AVX-512), the first user process dies and the kernel panics ("ptrace set
# fp regs failed"). Sets UML_PROBE_WHY when it fails.
UML_PROBE_WHY=""
probe_uml() {
  local dir=$WORK/uml-probe
  mkdir -p "$dir/root/bin" "$dir/root/dev" "$dir/root/proc"
  cp "$BUSYBOX" "$dir/root/bin/busybox"
  printf '#!/bin/busybox sh\necho KTLS-UML-PROBE-OK\n/bin/busybox poweroff -f\n' >"$dir/root/init"
  chmod +x "$dir/root/init"
  (cd "$dir/root" && find . | "$BUSYBOX" cpio -o -H newc 2>/dev/null | gzip -1) >"$dir/probe.cpio.gz"
  # The subshell (not exec'd: it waits) keeps bash's "Aborted" job message quiet (UML dies
  # by SIGABRT).
  (timeout -k 5 60 "$CACHE/uml/usr/bin/linux.uml" mem=64M "initrd=$dir/probe.cpio.gz" \
    con=null con0=null,fd:1 quiet panic=-1 </dev/null >"$dir/log" 2>&1; exit $?) 2>/dev/null
  local rc=$?
  tr -d '\r' <"$dir/log" | grep -q '^KTLS-UML-PROBE-OK' && return 0
  UML_PROBE_WHY=$(tr -d '\r' <"$dir/log" | grep -aE 'ptrace|panic' | head -2 | tr '\n' ' ')
  UML_PROBE_WHY="status $rc${UML_PROBE_WHY:+: ${UML_PROBE_WHY% }}"
  return 1
}

case $GUEST_KIND in
  uml)
    try_uml || skip "user-mode-linux unavailable (apt-get download user-mode-linux failed)"
    probe_uml || fail "user-mode-linux cannot boot on this host ($UML_PROBE_WHY); KTLS_VM_GUEST=qemu or auto uses qemu"
    ;;
  qemu) try_qemu || skip "qemu guest unavailable (qemu-system-x86 or linux-image-6.1 missing)" ;;
  auto)
    if try_uml && ! probe_uml; then
      log "user-mode-linux cannot boot on this host ($UML_PROBE_WHY); falling back to qemu TCG"
      try_qemu || skip "no guest kernel: user-mode-linux cannot boot here and qemu + linux-image-6.1 is missing"
    elif [ -z "$GUEST_NAME" ]; then
      try_qemu || skip "no guest kernel: neither user-mode-linux nor qemu + linux-image-6.1"
    fi
    ;;
  *) fail "KTLS_VM_GUEST must be auto, uml or qemu" ;;
esac
log "guest: $GUEST_NAME"

# ---------------------------------------------------------------- initramfs

STAGE=$WORK/root
KVER=$(ls "$MODROOT" | head -1)
mkdir -p "$STAGE"/{bin,sbin,proc,sys,dev,tmp,etc,lib/modules/"$KVER"/kernel}
cp "$BUSYBOX" "$STAGE/bin/busybox"
for d in net/tls crypto arch/x86/crypto lib/crypto; do
  [ -d "$MODROOT/$KVER/kernel/$d" ] || continue
  mkdir -p "$STAGE/lib/modules/$KVER/kernel/$d"
  cp -a "$MODROOT/$KVER/kernel/$d/." "$STAGE/lib/modules/$KVER/kernel/$d/"
done
cp "$MODROOT/$KVER"/modules.builtin* "$MODROOT/$KVER/modules.order" "$STAGE/lib/modules/$KVER/" 2>/dev/null
# busybox modprobe loads plain .ko files.
find "$STAGE/lib/modules" -name '*.ko.xz' -exec "$BUSYBOX" unxz {} + 2>/dev/null
find "$STAGE/lib/modules" -name '*.ko.zst' -exec sh -c 'for f; do zstd -qd --rm "$f"; done' _ {} + 2>/dev/null
"$BUSYBOX" depmod -b "$STAGE" "$KVER" || fail "depmod failed"
cp "$BIN_STAGE"/* "$STAGE/bin/"
# Every library the binaries need, and the dynamic loader, at the paths ldd names.
for bin in "$BIN_STAGE"/*; do
  for lib in $(ldd "$bin" 2>/dev/null | grep -o '/[^ ]*'); do
    [ -e "$STAGE$lib" ] && continue
    mkdir -p "$STAGE$(dirname "$lib")"
    cp -L "$lib" "$STAGE$lib"
  done
done
# OpenSSL's config, so the guest's libssl behaves as on the host.
[ -f /usr/lib/ssl/openssl.cnf ] && mkdir -p "$STAGE/usr/lib/ssl" && cp -L /usr/lib/ssl/openssl.cnf "$STAGE/usr/lib/ssl/"
[ -d "$ROOT/etc" ] && mkdir -p "$STAGE/etc/ktls-proxy" && cp -r "$ROOT/etc/." "$STAGE/etc/ktls-proxy/"
cp "$HERE/guest.sh" "$STAGE/guest.sh"
# Stage 2's certificate: ECDSA P-256, self-signed (the guest can make one too, more slowly).
if command -v openssl >/dev/null; then
  mkdir -p "$STAGE/etc/ktls-vm"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 7 \
    -subj /CN=guest.test -keyout "$STAGE/etc/ktls-vm/key.pem" -out "$STAGE/etc/ktls-vm/cert.pem" \
    >/dev/null 2>&1 || log "openssl could not make the stage-2 certificate; the guest will"
fi
cat >"$STAGE/init" <<EOF
#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin:/sbin HOME=/tmp
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev; mount -t tmpfs tmp /tmp
# The kernel runs /sbin/modprobe for request_module() (TCP_ULP "tls" autoloads the module).
ln -sf /bin/modprobe /sbin/modprobe
ip link set lo up
echo "guest: \$(uname -r), \$(nproc) cpu(s), up \$(cut -d' ' -f1 /proc/uptime)s"
for m in $GUEST_MODULES; do modprobe -q \$m 2>/dev/null; done
echo "guest: modules \$(lsmod | awk 'NR>1{print \$1}' | tr '\n' ' ')"
sh /guest.sh; rc=\$?
echo "guest: done after \$(cut -d' ' -f1 /proc/uptime)s"
echo "KTLS-GUEST-EXIT rc=\$rc"
poweroff -f
EOF
chmod +x "$STAGE/init" "$STAGE/guest.sh"
(cd "$STAGE" && find . | "$BUSYBOX" cpio -o -H newc 2>/dev/null | gzip -1) >"$WORK/initrd.cpio.gz" ||
  fail "cannot build the initramfs"
log "initramfs: $(du -h "$WORK/initrd.cpio.gz" | cut -f1)"

# ---------------------------------------------------------------- boot

GUEST_LOG=$WORK/guest.log
: >"$GUEST_LOG"
T_BOOT=$(date +%s)
timeout -k 10 "$TIMEOUT" "${KERNEL_CMD[@]}" >"$GUEST_LOG" 2>&1 </dev/null &
GUEST_PID=$!
# Show the guest's lines as they come (serial consoles add CRs and terminal escapes); the
# follower ends by itself when the guest process does.
tail -n +1 -F --pid="$GUEST_PID" "$GUEST_LOG" 2>/dev/null |
  sed -u -e 's/\r$//' -e 's/\x1b\[[0-9;?]*[a-zA-Z]//g' -e 's/\x1bc//g' |
  grep --line-buffered -vE '^\s*$|^\[ *[0-9.]+\] ' | sed -u 's/^/  | /' &
wait "$GUEST_PID"
GUEST_RC=$?
GUEST_PID=""
wait
T_END=$(date +%s)
sed -i -e 's/\r$//' -e 's/\x1b\[[0-9;?]*[a-zA-Z]//g' -e 's/\x1bc//g' "$GUEST_LOG"
log "guest $GUEST_NAME ran $((T_END - T_BOOT))s (status $GUEST_RC); run.sh total $((T_END - T_START))s"

[ "$GUEST_RC" = 124 ] && fail "guest timed out after ${TIMEOUT}s"
VERDICT=$(grep -E '^guest: (PASS|FAIL)' "$GUEST_LOG" | tail -1)
[ -n "$VERDICT" ] || fail "guest gave no verdict (status $GUEST_RC; see the log above)"
grep -q '^KTLS-GUEST-EXIT rc=0$' "$GUEST_LOG" || fail "${VERDICT#guest: FAIL }"
case $VERDICT in
  "guest: PASS "*) echo "ktls-vm: PASS ${VERDICT#guest: PASS }"; exit 0 ;;
  *) fail "${VERDICT#guest: FAIL }" ;;
esac
