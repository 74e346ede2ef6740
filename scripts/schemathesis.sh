#!/usr/bin/env bash
# Fuzzes the running server against the committed OpenAPI document with schemathesis (PyPI):
# generated and mutated requests for every operation except /configure, checking for server
# errors, response-schema violations, undocumented status codes, content types and headers.
# Runs the debug server on the embedded default and, when DATABASE_URL is set, on Postgres
# (scripts/test-server.sh).
# One worker: with two, hypothesis (on CPython 3.11) parses lambda sources on two threads at once
# and CPython's AST constructor fails with "recursion depth mismatch", a spurious runtime error.
# Usage: scripts/schemathesis.sh [EXTRA schemathesis ARGS]
set -euo pipefail
cd "$(dirname "$0")/.."
version=4.32.5
venv=${MEM0_SCHEMATHESIS_VENV:-${TMPDIR:-/tmp}/mem0-rs-schemathesis-$version}
if [[ ! -x $venv/bin/schemathesis ]]; then
  echo "schemathesis: installing schemathesis==$version into $venv" >&2
  python3 -m venv "$venv" >&2
  "$venv/bin/pip" install --quiet --disable-pip-version-check "schemathesis==$version" >&2
fi
scripts/fetch-model.sh
cargo build --locked --quiet -p mem0-server
reports=target/schemathesis
mkdir -p "$reports"
stores=(sqlite)
if [[ -n ${DATABASE_URL:-} ]]; then stores+=(pgvector); fi
status=0
source scripts/test-server.sh
for store in "${stores[@]}"; do
  start_test_server "$store"
  echo "== schemathesis against the $store store (log: $SERVER_DATA/server.log)"
  if ! PYTHONPATH=scripts SCHEMATHESIS_HOOKS=schemathesis_hooks "$venv/bin/schemathesis" --no-color run openapi/openapi.json \
      --url "$SERVER_URL" \
      --header "X-API-Key: $ADMIN_KEY" \
      --exclude-path-regex '^/configure' \
      --exclude-checks positive_data_acceptance \
      --max-examples 100 --seed 20261201 --generation-deterministic \
      --request-timeout 30 --workers 1 \
      --report junit --report-junit-path "$reports/junit-$store.xml" "$@"; then
    status=1
    grep -E "ERROR|panicked" "$SERVER_DATA/server.log" | head -20 >&2 || true
    stop_test_server KEEP
  else
    stop_test_server
  fi
done
exit $status
