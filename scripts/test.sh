#!/usr/bin/env bash
# Runs the whole test suite: unit, store conformance and HTTP tests against real SQLite stores and
# the real local embedder (fetched on first use). Extra arguments go to `cargo test`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/fetch-model.sh
cargo test --workspace --locked "$@"
