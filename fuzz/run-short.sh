#!/usr/bin/env bash
# Runs every cargo-fuzz target in fuzz/fuzz_targets/ for FUZZ_SECONDS each (default 60), one
# after another on one core, and prints executions and coverage per target. Fails on the first
# finding (the input is saved under fuzz/artifacts/TARGET/) or when a file in fuzz_targets/ has
# no [[bin]] entry in fuzz/Cargo.toml (`cargo fuzz add NAME` writes both).
#
# Usage: fuzz/run-short.sh                      (CI: tests/run.sh calls it)
#        FUZZ_SECONDS=900 nice -n 19 fuzz/run-short.sh   (the long run before a release)
#        FUZZ_TARGETS="http1_parse" fuzz/run-short.sh    (some targets only)
#        fuzz/run-short.sh --build-only                  (install and build, run nothing:
#                                                        tests/run.sh builds them early)
#
# cargo-fuzz needs nightly flags; RUSTC_BOOTSTRAP=1 lets the stable toolchain accept them.
# Targets are built without a sanitizer: the crates under test forbid `unsafe`, so AddressSanitizer
# would only slow the run (it would also instrument httparse's unsafe SIMD code; run
# `cargo fuzz run -s address TARGET` for that). The corpus grows in fuzz/corpus/TARGET; a target
# with committed seeds in fuzz/seeds/TARGET (e.g. tls_records: valid records written by
# fuzz/seeds/tls_records.py) starts from them too.
set -euo pipefail
cd "$(dirname "$0")"

seconds="${FUZZ_SECONDS:-60}"
build_only=""
[ "${1:-}" = "--build-only" ] && build_only=1
export RUSTC_BOOTSTRAP=1

# libfuzzer-sys compiles libFuzzer (C++).
../etc/need-packages.sh g++

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "== installing cargo-fuzz (once per machine)"
    CARGO_PROFILE_DEV_DEBUG=0 cargo install cargo-fuzz --locked --quiet --debug
fi

all_targets() {
    local file
    for file in fuzz_targets/*.rs; do
        basename "$file" .rs
    done
}

missing=""
for target in $(all_targets); do
    if ! grep -q "^path = \"fuzz_targets/$target.rs\"" Cargo.toml; then
        missing="$missing $target"
    fi
done
if [ -n "$missing" ]; then
    echo "fuzz/Cargo.toml has no [[bin]] for:$missing (add one like the others, or use \`cargo fuzz add\`)" >&2
    exit 1
fi

targets="${FUZZ_TARGETS:-$(all_targets)}"
echo "== cargo fuzz build ($(echo $targets | wc -w) targets)"
start=$(date +%s)
build_log="$(mktemp)"
# One build for every target ([[bin]] in Cargo.toml); a failure stops here.
if ! cargo fuzz build --sanitizer none >"$build_log" 2>&1; then
    tail -40 "$build_log" >&2
    echo "cargo fuzz build failed" >&2
    exit 1
fi
rm -f "$build_log"
for target in $targets; do
    if [ ! -x "target/x86_64-unknown-linux-gnu/release/$target" ]; then
        echo "fuzz target $target did not build" >&2
        exit 1
    fi
done
echo "   built in $(( $(date +%s) - start )) s"
[ -z "$build_only" ] || exit 0

for target in $targets; do
    echo "== fuzz $target for $seconds s"
    mkdir -p "corpus/$target"
    log="$(mktemp)"
    status=0
    # Committed seeds (fuzz/seeds/TARGET, read only; new inputs go to corpus/TARGET).
    seeds=""
    [ -d "seeds/$target" ] && seeds="seeds/$target"
    cargo fuzz run --sanitizer none "$target" "corpus/$target" $seeds -- \
        -max_total_time="$seconds" -print_final_stats=1 >"$log" 2>&1 || status=$?
    # The last status line has the coverage (`cov:` edges, `ft:` features) and corpus size.
    done_line="$(grep -E '^#[0-9]+.*(DONE|pulse|NEW|REDUCE)' "$log" | tail -1 || true)"
    execs="$(grep -E '^stat::number_of_executed_units' "$log" | awk '{print $2}' || true)"
    echo "   executions ${execs:-?}; last status: ${done_line:-none}"
    if [ "$status" -ne 0 ]; then
        tail -40 "$log" >&2
        echo "fuzz target $target FAILED (exit $status); the input is in fuzz/artifacts/$target/" >&2
        rm -f "$log"
        exit 1
    fi
    rm -f "$log"
done
