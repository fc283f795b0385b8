#!/usr/bin/env bash
# A short fuzz run of every target (FUZZ_SECONDS each, 15 by default: ~120 s of fuzzing in all,
# plus the build), for `make test` to call. Exits non-zero if a target finds a crash; the input
# is then in fuzz/artifacts/<target>/ and the log is printed.
#
# cargo-fuzz passes nightly-only flags (-Zsanitizer=address); RUSTC_BOOTSTRAP=1 lets the
# stable toolchain accept them.
set -euo pipefail
cd "$(dirname "$0")"
seconds=${FUZZ_SECONDS:-15}
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
export RUSTC_BOOTSTRAP=1
cargo fuzz build
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for target in h1_request h1_chunked ws_frames ws_handshake files_path tls_server h2_server h2_hpack; do
    mkdir -p "corpus-work/$target"
    if cargo fuzz run "$target" "corpus-work/$target" "corpus/$target" -- \
        -max_total_time="$seconds" -print_final_stats=1 >"$log" 2>&1; then
        echo "fuzz $target: $(grep -E '^Done' "$log"), $(grep -E 'average_exec_per_sec' "$log" | tr -s ' ')"
    else
        cat "$log"
        echo "fuzz $target: FAILED"
        exit 1
    fi
done
