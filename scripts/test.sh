#!/usr/bin/env bash
# Runs the whole test suite: unit tests, the store conformance suite against real SQLite and a real
# Postgres 18 + pgvector (started here from PyPI unless DATABASE_URL is set), the HTTP tests with
# the real local embedder (fetched on first use), and schemathesis against a running server on
# both stores (scripts/schemathesis.sh), and Mem0's own Python and npm SDKs against it on both
# stores (scripts/clients.sh). The HTTP tests run twice: on the embedded default, then
# with MEM0_TEST_STACK=postgres on the pgvector store with the history in Postgres. Extra
# arguments go to `cargo test` and skip schemathesis and the SDKs.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/fetch-model.sh
if [[ -z ${DATABASE_URL:-} ]]; then
  pg_dir=$(mktemp -d "${TMPDIR:-/tmp}/mem0-rs-test-pg.XXXXXX")
  trap 'scripts/pg-down.sh "$pg_dir" || true; rm -rf "$pg_dir"' EXIT
  eval "$(scripts/pg-up.sh "$pg_dir")"
  export DATABASE_URL
fi
cargo test --workspace --locked "$@"
# The HTTP suite once more with everything in Postgres (pgvector store, history on Postgres).
MEM0_TEST_STACK=postgres cargo test --locked -p mem0-http-tests "$@"
if [[ $# -eq 0 ]]; then
  scripts/schemathesis.sh
  scripts/clients.sh
fi
