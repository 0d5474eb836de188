#!/usr/bin/env bash
# Builds the Debian packages: the release binaries, their man pages (from the clap
# definitions, through each binary's hidden --man-page), then `cargo deb` with the metadata
# in proxy/Cargo.toml (ktls-proxy: the proxy, installed as /usr/bin/ktls-proxy) and
# tls-perf/Cargo.toml (ktls-proxy-tools: tls-perf, http-perf, origin). Prints the path of the tools
# .deb, then of the ktls-proxy .deb (last). Needs cargo-deb (`cargo install cargo-deb
# --locked`). Usage: etc/debian/build-deb.sh [cargo-deb options, e.g. --fast]
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
command -v cargo-deb >/dev/null || { echo "build-deb.sh: cargo-deb is missing: cargo install cargo-deb --locked" >&2; exit 1; }
cargo build --release --bins -p proxy -p tls-perf
mkdir -p target/man target/deb
# Stripped as dh_strip does (the release profile keeps debug info for profiling; lintian
# refuses unstripped binaries), the proxy under its installed name.
strip_to() {
    strip --strip-unneeded --remove-section=.comment --remove-section=.note -o "target/deb/$2" "target/release/$1"
}
strip_to proxy ktls-proxy
for bin in tls-perf http-perf origin; do strip_to "$bin" "$bin"; done
rm -f target/man/proxy.1.gz
target/release/proxy --man-page | gzip -9n > target/man/ktls-proxy.1.gz
for bin in tls-perf http-perf origin; do
    "target/release/$bin" --man-page | gzip -9n > "target/man/$bin.1.gz"
done
cargo deb -p tls-perf --no-build -o target/debian/ "$@" 2>&1 | tail -n 1
cargo deb -p proxy --no-build -o target/debian/ "$@" 2>&1 | tail -n 1
