#!/usr/bin/env bash
# Coverage-guided fuzzing with libFuzzer (libfuzzer-sys) on the stable toolchain: the target is
# built with LLVM's coverage instrumentation (the flags cargo-fuzz passes, without a sanitizer:
# the code is safe Rust, and what we look for is a panic, an abort or a hang), then run on
# fuzz/corpus/<target>/ (the kept inputs, read only) and target/fuzz/corpus/<target>/ (what it
# finds). A crash is written to target/fuzz/artifacts/<target>/ and the script fails.
#
#   scripts/fuzz.sh frames 30               # 30 seconds
#   scripts/fuzz.sh requests 600 -runs=10000000
#
# Once a crash is fixed, copy its input into fuzz/corpus/<target>/: the test suite
# (fuzz/tests/regressions.rs) runs every kept input.
set -euo pipefail
target=${1:?usage: scripts/fuzz.sh frames|requests [seconds] [libFuzzer flags...]}
seconds=${2:-60}
shift $(( $# < 2 ? $# : 2 ))
repo=$(cd "$(dirname "$0")/.." && pwd)
features=()
[ "$target" = frames ] && features=(--no-default-features)
export RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
 -Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
 -Cllvm-args=-sanitizer-coverage-trace-compares -Cdebug-assertions -Coverflow-checks --cfg fuzzing"
# Its own target dir: the instrumented build must not replace the ordinary one. An explicit
# --target keeps the flags off build scripts (they run on the host, without libFuzzer).
triple=$(rustc -vV | sed -n 's/^host: //p')
cargo build --release -p recalld-fuzz --bin "$target" "${features[@]}" --target "$triple" --target-dir "$repo/target/fuzz"
found="$repo/target/fuzz/corpus/$target"
crashes="$repo/target/fuzz/artifacts/$target"
mkdir -p "$found" "$crashes"
"$repo/target/fuzz/$triple/release/$target" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
  -artifact_prefix="$crashes/" -print_final_stats=1 "$@" "$found" "$repo/fuzz/corpus/$target"
