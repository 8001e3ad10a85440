#!/usr/bin/env bash
# Coverage-guided fuzzing of the sans-IO parts (libFuzzer through cargo-fuzz,
# on stable Rust: no sanitizer). Each target asserts no panic and an output
# bounded by a stated function of the input size; libFuzzer's -timeout flags
# any input that takes seconds (a super-linear path).
#
#   bash fuzz/run.sh                 # every target for FUZZ_SECONDS (default 15) each
#   FUZZ_SECONDS=1800 bash fuzz/run.sh natural_parser
#
# The corpus grows in fuzz/corpus/<target> (not committed); fuzz/seeds holds
# the committed starting inputs. A failing input is saved under
# fuzz/artifacts/<target>/ and replayed with
# `cargo fuzz run --dev -s none <target> <file>`.
set -euo pipefail
cd "$(dirname "$0")/.."

version=0.13.2
if [ "$(cargo fuzz --version 2>/dev/null)" != "cargo-fuzz $version" ]; then
  start=$SECONDS
  cargo install --quiet --locked cargo-fuzz --version "$version"
  echo "   cargo-fuzz $version installed in $((SECONDS - start)) s"
fi
cargo fmt --manifest-path fuzz/Cargo.toml -- --check
seconds=${FUZZ_SECONDS:-15}
targets=("$@")
[ ${#targets[@]} -gt 0 ] || mapfile -t targets < <(cargo fuzz list)
# The dev profile (opt-level 1, see fuzz/Cargo.toml): no second release build.
cargo fuzz build --dev -s none
for target in "${targets[@]}"; do
  mkdir -p "fuzz/corpus/$target"
  cargo fuzz run --dev -s none "$target" "fuzz/corpus/$target" "fuzz/seeds/$target" -- \
    -max_total_time="$seconds" -max_len=65536 -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 2>&1 | grep -E '^(Done|stat::number_of_executed_units|stat::peak_rss_mb)|panicked|ERROR|SUMMARY' |
    sed "s/^/   $target: /"
  [ "${PIPESTATUS[0]}" = 0 ] || { echo "fuzz target $target failed" >&2; exit 1; }
done
