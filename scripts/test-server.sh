# Sourced by the scripts that test a running server (schemathesis.sh, clients.sh).
# start_test_server STORE [VAR=VALUE…] runs the debug server on STORE (sqlite, or pgvector with
# the history in Postgres too, as replicas run; needs DATABASE_URL) as in production
# (authentication on, a fresh bootstrap admin key; rate limits high enough not to interfere) in a
# throwaway data directory, with any extra environment given, and waits until it answers. It
# sets SERVER_PID, SERVER_URL, SERVER_DATA (holding server.log) and ADMIN_KEY.
# stop_test_server stops it and removes its data unless KEEP is given (to read the log).

start_test_server() {
  local store=$1
  shift
  SERVER_DATA=$(mktemp -d "${TMPDIR:-/tmp}/mem0-rs-server.XXXXXX")
  local port pg_url=${DATABASE_URL:-} history=sqlite
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  if [[ $store == pgvector ]]; then
    history=postgres
    local db="mem0_test_server_$$_$RANDOM"
    "${MEM0_PG_BIN:+$MEM0_PG_BIN/}psql" -q -d "$DATABASE_URL" -c "drop database if exists $db" -c "create database $db" >/dev/null
    pg_url="${DATABASE_URL%/*}/$db"
  fi
  ADMIN_KEY=$(python3 -c 'import secrets; print(secrets.token_hex(24))')
  SERVER_URL="http://127.0.0.1:$port"
  env -u OPENAI_API_KEY -u OPENAI_BASE_URL -u ANTHROPIC_API_KEY \
    RUST_LOG=warn \
    ADMIN_API_KEY="$ADMIN_KEY" \
    MEM0__AUTH__DISABLED=false \
    MEM0__RATE_LIMIT__READ_PER_MINUTE=1000000 \
    MEM0__RATE_LIMIT__WRITE_PER_MINUTE=1000000 \
    MEM0__RATE_LIMIT__ADMIN_PER_MINUTE=1000000 \
    MEM0__RATE_LIMIT__OPEN_PER_MINUTE=1000000 \
    MEM0__SERVER__BIND="127.0.0.1:$port" \
    MEM0__MEMORY__VECTOR_STORE__PROVIDER="$store" \
    MEM0__MEMORY__VECTOR_STORE__SQLITE__PATH="$SERVER_DATA/memories.db" \
    MEM0__MEMORY__HISTORY__PROVIDER="$history" \
    MEM0__MEMORY__HISTORY__PATH="$SERVER_DATA/history.db" \
    MEM0__CONFIGURE__STATE_PATH="$SERVER_DATA/runtime-config.json" \
    DATABASE_URL="$pg_url" \
    "$@" \
    target/debug/mem0-server serve >"$SERVER_DATA/server.log" 2>&1 &
  SERVER_PID=$!
  for _ in $(seq 1 120); do
    curl -fs "$SERVER_URL/health" >/dev/null 2>&1 && return 0
    kill -0 "$SERVER_PID" 2>/dev/null || { cat "$SERVER_DATA/server.log" >&2; return 1; }
    sleep 0.5
  done
  echo "the server did not answer within 60 s" >&2
  return 1
}

stop_test_server() {
  kill "$SERVER_PID" 2>/dev/null || true
  wait "$SERVER_PID" 2>/dev/null || true
  if [[ ${1:-} != KEEP ]]; then rm -rf "$SERVER_DATA"; fi
}
