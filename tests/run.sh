#!/usr/bin/env bash
# The whole test suite, from a fresh clone: checks formatting and lints, then
# runs every unit, property, golden and integration test. Everything it needs
# comes from crates.io through cargo; tests talk only to loopback.
set -euo pipefail
cd "$(dirname "$0")/.."

command -v cargo >/dev/null || { echo "cargo is required (https://rustup.rs)" >&2; exit 1; }
rustup component list --installed 2>/dev/null | grep -q '^rustfmt' || rustup component add rustfmt clippy

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy --locked --all-targets -- -D warnings
echo "== cargo test"
cargo test --locked --all-targets
