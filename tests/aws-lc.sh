#!/usr/bin/env bash
# The AWS-LC build (issue 32, phase 1: the `aws-lc` cargo feature, not the default yet): lints
# it, runs ktls's tests on it (the record layer against AWS-LC's own records) and the TLS
# end-to-end tests against the proxy built on it. Called by tests/run.sh; runs alone too.
#
# Only the proxy is built on AWS-LC. tls-perf, http-perf and origin stay on the system
# OpenSSL: the client that measures the proxy and nginx must not change with the server's
# library (and tls-perf resumes TLS 1.3 through OpenSSL's client session handling, which
# AWS-LC does not mirror). target/aws-lc-bin holds that mix: the AWS-LC proxy and links to
# the default build's tools; target/release/proxy is the default build again afterwards.
set -euo pipefail
cd "$(dirname "$0")/.."

# aws-lc-sys builds AWS-LC from source with cmake and generates its bindings with libclang.
etc/need-packages.sh cmake clang libclang-dev

echo "== AWS-LC: cargo clippy (ktls, proxy)"
cargo clippy -p ktls -p proxy --all-targets --features ktls/aws-lc,proxy/aws-lc --quiet \
    -- -D warnings
echo "== AWS-LC: cargo build --release -p proxy"
cargo build --release -p proxy --bins --features aws-lc --quiet
mkdir -p target/aws-lc-bin
cp target/release/proxy target/aws-lc-bin/proxy
cargo build --release -p proxy -p tls-perf --bins --quiet
for tool in tls-perf http-perf origin; do
    ln -sf "../release/$tool" "target/aws-lc-bin/$tool"
done
target/aws-lc-bin/proxy --version | grep -q '^TLS library: AWS-LC ' ||
    { echo "target/aws-lc-bin/proxy is not the AWS-LC build" >&2; exit 1; }
echo "== AWS-LC: cargo test -p ktls"
cargo test --release -p ktls --features aws-lc --quiet
echo "== AWS-LC: TLS end-to-end tests against the AWS-LC proxy"
KTLS_PROXY_BIN_DIR="$PWD/target/aws-lc-bin" cargo test --release -p e2e --quiet \
    --test proxy_tls --test tls_record --test security_tls --test tls_perf
