#!/usr/bin/env bash
# Runs every test of the project: checks prerequisites (installing them when root), format,
# lints, the release build, unit and end-to-end tests, then the kTLS tests in a Linux guest.
# Usage: tests/run.sh            (from anywhere inside the repository)
set -euo pipefail
cd "$(dirname "$0")/.."

# Debian packages the build and the tests use: OpenSSL headers for the openssl crate, and the
# real peers the end-to-end tests talk to (openssl s_client, curl).
packages=(libssl-dev pkg-config openssl curl)
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
    if [ "$(id -u)" = 0 ]; then
        echo "tests/run.sh: installing ${missing[*]}"
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
    else
        echo "tests/run.sh: missing packages: ${missing[*]} (run as root, or: sudo apt-get install ${missing[*]})" >&2
        exit 1
    fi
fi

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy --workspace --all-targets --quiet -- -D warnings
echo "== cargo build --release"
cargo build --release --workspace --bins --quiet
echo "== cargo test (unit and end-to-end, release build)"
KTLS_PROXY_BIN_DIR="$PWD/target/release" cargo test --workspace --release --quiet
if [ -x tests/ktls-vm/run.sh ]; then
    echo "== kTLS in a Linux guest"
    tests/ktls-vm/run.sh
fi
