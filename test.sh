#!/usr/bin/env bash
# The whole test suite, from a fresh clone: cargo fetches and builds everything.
# More randomized cases: THUND_PROPTEST_CASES=500 ./test.sh
# It checks what reviewers check: formatting, clippy with warnings denied,
# docs with broken intra-doc links denied, the library without the CLI
# feature, then every test (unit, integration, doc).
set -euo pipefail
cd "$(dirname "$0")"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
RUSTDOCFLAGS="-D rustdoc::broken_intra_doc_links -D rustdoc::private_intra_doc_links" \
  cargo doc --workspace --no-deps
cargo build -p thund --lib --no-default-features
# a PostgreSQL server on 127.0.0.1 for the sink tests (THUND_PG_URL)
source .ci/postgres.sh
cargo test --workspace --no-fail-fast "$@"
# the README's live example runs, then resumes from its own checkpoint
live_state=$(mktemp -d)
cargo run -q --example live -- "$live_state" >/dev/null
cargo run -q --example live -- "$live_state" >/dev/null
rm -rf "$live_state"
