#!/usr/bin/env bash
# The whole test suite, from a fresh clone: cargo fetches and builds everything.
# More randomized cases: THUND_PROPTEST_CASES=500 ./test.sh
set -euo pipefail
cd "$(dirname "$0")"
cargo test --workspace --no-fail-fast "$@"
