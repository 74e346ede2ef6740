#!/usr/bin/env bash
# Fuzzes the running server against the committed OpenAPI document with schemathesis (PyPI):
# generated and mutated requests for every operation except /configure, checking for server
# errors, response-schema violations, undocumented status codes, content types and headers.
# Runs the debug server on the embedded default (and, when DATABASE_URL is set, on Postgres with
# the history there too, as replicas run) as
# in production (authentication on, the bootstrap admin key; rate limits high enough not to
# interfere), in a throwaway data directory.
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
for store in "${stores[@]}"; do
  data=$(mktemp -d "${TMPDIR:-/tmp}/mem0-rs-schemathesis.XXXXXX")
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  pg_url=${DATABASE_URL:-}
  history=sqlite
  if [[ $store == pgvector ]]; then
    history=postgres
    db="mem0_schemathesis_$$"
    "${MEM0_PG_BIN:+$MEM0_PG_BIN/}psql" -q -d "$DATABASE_URL" -c "drop database if exists $db" -c "create database $db" >/dev/null
    pg_url="${DATABASE_URL%/*}/$db"
  fi
  admin_key=$(python3 -c 'import secrets; print(secrets.token_hex(24))')
  env -u OPENAI_API_KEY -u OPENAI_BASE_URL -u ANTHROPIC_API_KEY \
    RUST_LOG=warn \
    ADMIN_API_KEY="$admin_key" \
    MEM0__AUTH__DISABLED=false \
    MEM0__RATE_LIMIT__READ_PER_MINUTE=1000000 \
    MEM0__RATE_LIMIT__WRITE_PER_MINUTE=1000000 \
    MEM0__RATE_LIMIT__ADMIN_PER_MINUTE=1000000 \
    MEM0__RATE_LIMIT__OPEN_PER_MINUTE=1000000 \
    MEM0__SERVER__BIND="127.0.0.1:$port" \
    MEM0__MEMORY__VECTOR_STORE__PROVIDER="$store" \
    MEM0__MEMORY__VECTOR_STORE__SQLITE__PATH="$data/memories.db" \
    MEM0__MEMORY__HISTORY__PROVIDER="$history" \
    MEM0__MEMORY__HISTORY__PATH="$data/history.db" \
    MEM0__CONFIGURE__STATE_PATH="$data/runtime-config.json" \
    DATABASE_URL="$pg_url" \
    target/debug/mem0-server serve >"$data/server.log" 2>&1 &
  server=$!
  for _ in $(seq 1 120); do
    curl -fs "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
    kill -0 "$server" 2>/dev/null || { cat "$data/server.log" >&2; exit 1; }
    sleep 0.5
  done
  echo "== schemathesis against the $store store, $history history (log: $data/server.log)"
  if ! "$venv/bin/schemathesis" --no-color run openapi/openapi.json \
      --url "http://127.0.0.1:$port" \
      --header "X-API-Key: $admin_key" \
      --exclude-path-regex '^/configure' \
      --exclude-checks positive_data_acceptance \
      --max-examples 100 --seed 20261201 --generation-deterministic \
      --request-timeout 30 --workers 2 \
      --report junit --report-junit-path "$reports/junit-$store.xml" "$@"; then
    status=1
    grep -E "ERROR|panicked" "$data/server.log" | head -20 >&2 || true
  fi
  kill "$server" 2>/dev/null || true
  wait "$server" 2>/dev/null || true
  if [[ $status == 0 ]]; then rm -rf "$data"; fi
done
exit $status
