#!/usr/bin/env bash
# Builds the Debian package: the release binaries, their man pages (from the clap
# definitions, through each binary's hidden --man-page), then `cargo deb` with the metadata
# in proxy/Cargo.toml. Prints the path of the .deb. Needs cargo-deb
# (`cargo install cargo-deb --locked`). Usage: etc/debian/build-deb.sh
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
command -v cargo-deb >/dev/null || { echo "build-deb.sh: cargo-deb is missing: cargo install cargo-deb --locked" >&2; exit 1; }
cargo build --release --bins -p proxy -p tls-perf
mkdir -p target/man
for bin in proxy tls-perf http-perf origin; do
    "target/release/$bin" --man-page | gzip -9n > "target/man/$bin.1.gz"
done
cargo deb -p proxy --no-build --no-strip -o target/debian/ "$@" 2>&1 | tail -n 1
