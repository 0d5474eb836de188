#!/usr/bin/env bash
# The system-OpenSSL build (issue 32: AWS-LC is the default; `--no-default-features`, named
# `--features system-openssl` on proxy, builds every crate on the system's libssl instead, for
# distributions that require it). Lints the TLS crates on it, runs ktls's tests on it (the
# record layer against OpenSSL's own records) and the TLS end-to-end tests with the proxy,
# the tools and the tests' own TLS peers all on the system OpenSSL: the differential check of
# the default build, whose tests run everything on AWS-LC. Called by tests/run.sh; runs alone.
#
# Same target directory as the default build: the two builds' artifacts differ in their
# features, so Cargo keeps both and switching back costs only the copy of the binaries.
# target/system-openssl-bin holds this build's binaries; target/release is the default build
# again afterwards.
set -euo pipefail
cd "$(dirname "$0")/.."

etc/need-packages.sh libssl-dev pkg-config

# Lints the crates whose code differs by TLS library (ktls's cfg'd record layer and hand-over,
# proxy's and tls-perf's feature checks); the others build the same on both and were linted by
# tests/run.sh. The end-to-end crate's test files are compiled below only where they run.
echo "== system OpenSSL: cargo clippy --release -p ktls -p proxy -p tls-perf --no-default-features"
cargo clippy --release -p ktls -p proxy -p tls-perf --all-targets --no-default-features --quiet \
    -- -D warnings
echo "== system OpenSSL: cargo build --release -p proxy -p tls-perf"
cargo build --release -p proxy -p tls-perf --bins --no-default-features \
    --features proxy/system-openssl --quiet
mkdir -p target/system-openssl-bin
for bin in proxy tls-perf http-perf origin; do
    cp "target/release/$bin" "target/system-openssl-bin/$bin"
done
target/system-openssl-bin/proxy --version | grep -q '^TLS library: OpenSSL ' ||
    { echo "target/system-openssl-bin/proxy is not the system-OpenSSL build" >&2; exit 1; }
echo "== system OpenSSL: cargo test -p ktls"
cargo test --release -p ktls --quiet
echo "== system OpenSSL: TLS end-to-end tests"
KTLS_PROXY_BIN_DIR="$PWD/target/system-openssl-bin" cargo test --release -p e2e \
    --no-default-features --quiet \
    --test proxy_tls --test tls_record --test tls_record_attacks --test security_tls \
    --test tls_perf --test tls_perf_errors --test tls_record_memory --test ticket_keys \
    --test fingerprints --test acme_tls_alpn
echo "== target/release back to the default (AWS-LC) build"
cargo build --release -p proxy -p tls-perf --bins --quiet
