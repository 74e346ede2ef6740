#!/usr/bin/env bash
# Runs the clients agents already use, unchanged, against a running server: Mem0's Python SDK
# (mem0ai from PyPI, pinned with all its dependencies in tests/sdk/python/requirements.txt), its
# npm SDK (mem0ai, pinned in tests/sdk/js/package-lock.json) and the official MCP client (mcp
# from PyPI, pinned in tests/mcp/requirements.txt; over /mcp and over `mcp --stdio`), and reads
# /metrics with the Prometheus project's Python parser (tests/metrics/) and the server's
# OpenTelemetry traces through a stand-in OTLP/HTTP receiver (tests/traces/), and drives the
# dashboard in a headless Chromium (tests/ui/; Debian's chromium, installed by
# scripts/ensure-chromium.sh when missing; screenshots in target/ui-screenshots/). Each test
# makes every call with real API keys and checks what comes back (tests/sdk/, tests/mcp/).
# infer=true adds go to a local stand-in for an OpenAI-compatible LLM (tests/sdk/fake_openai.py);
# nothing leaves the machine (the SDKs' telemetry is switched off). Runs on the embedded default
# and, when DATABASE_URL is set, on Postgres (scripts/test-server.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
sdk_cache=${MEM0_SDK_CACHE:-${TMPDIR:-/tmp}/mem0-rs-sdk}
# A virtualenv per pinned requirements file (reused while the file is unchanged).
python_env() {
  local requirements=$1 venv
  venv=$sdk_cache/python-$(sha256sum "$requirements" | cut -c1-12)
  if [[ ! -x $venv/bin/python ]]; then
    echo "clients: installing $requirements into $venv" >&2
    rm -rf "$venv.tmp"
    python3 -m venv "$venv.tmp" >&2
    "$venv.tmp/bin/pip" install --quiet --disable-pip-version-check --no-deps -r "$requirements" >&2
    mv "$venv.tmp" "$venv"
  fi
  echo "$venv"
}
sdk_venv=$(python_env tests/sdk/python/requirements.txt)
mcp_venv=$(python_env tests/mcp/requirements.txt)
metrics_venv=$(python_env tests/metrics/requirements.txt)
ui_venv=$(python_env tests/ui/requirements.txt)
chromium=$(scripts/ensure-chromium.sh)
node_dir=$sdk_cache/js-$(sha256sum tests/sdk/js/package-lock.json | cut -c1-12)
if [[ ! -d $node_dir/node_modules/mem0ai ]]; then
  echo "clients: installing the npm SDK into $node_dir" >&2
  rm -rf "$node_dir.tmp" && mkdir -p "$node_dir.tmp"
  cp tests/sdk/js/package.json tests/sdk/js/package-lock.json "$node_dir.tmp/"
  (cd "$node_dir.tmp" && npm ci --legacy-peer-deps --no-audit --no-fund --loglevel=error >&2)
  rm -rf "$node_dir" && mv "$node_dir.tmp" "$node_dir"
fi
scripts/fetch-model.sh
cargo build --locked --quiet -p mem0-server

fake_dir=$(mktemp -d "${TMPDIR:-/tmp}/mem0-rs-fake-llm.XXXXXX")
python3 tests/sdk/fake_openai.py "$fake_dir/port" &
fake=$!
# Traces go to a stand-in for an OpenTelemetry Collector (tests/traces/).
python3 tests/traces/otlp_receiver.py "$fake_dir/otlp" &
otlp=$!
trap 'kill $fake $otlp 2>/dev/null || true; rm -rf "$fake_dir"' EXIT
for _ in $(seq 1 50); do [[ -s $fake_dir/port && -s $fake_dir/otlp ]] && break; sleep 0.1; done
llm_url="http://127.0.0.1:$(cat "$fake_dir/port")/v1"
otlp_url="http://127.0.0.1:$(cat "$fake_dir/otlp")"

stores=(sqlite)
if [[ -n ${DATABASE_URL:-} ]]; then stores+=(pgvector); fi
status=0
source scripts/test-server.sh
for store in "${stores[@]}"; do
  start_test_server "$store" OPENAI_API_KEY=sk-fake-key OPENAI_BASE_URL="$llm_url" \
    MEM0__TRACES__ENABLED=true MEM0__TRACES__ENDPOINT="$otlp_url/v1/traces" OTEL_BSP_SCHEDULE_DELAY=200
  export MEM0_TELEMETRY=false MEM0_TEST_URL=$SERVER_URL MEM0_TEST_ADMIN_KEY=$ADMIN_KEY MEM0_TEST_OTLP=$otlp_url
  # First, while nothing else runs: its counters must move by exactly its own requests.
  echo "== /metrics through Prometheus's Python parser against the $store store (log: $SERVER_DATA/server.log)"
  "$metrics_venv/bin/python" tests/metrics/test_metrics.py || status=1
  echo "== traces through an OTLP/HTTP receiver from the $store store"
  python3 tests/traces/test_traces.py || status=1
  echo "== the dashboard in headless Chromium against the $store store"
  MEM0_CHROMIUM=$chromium MEM0_UI_ARTIFACTS=$root/target/ui-screenshots/$store \
    "$ui_venv/bin/python" tests/ui/test_ui.py || status=1
  echo "== Mem0's Python SDK against the $store store"
  "$sdk_venv/bin/python" tests/sdk/python/test_sdk.py || status=1
  echo "== Mem0's npm SDK against the $store store"
  NODE_PATH=$node_dir/node_modules node tests/sdk/js/test_sdk.cjs || status=1
  echo "== the MCP client against the $store store"
  MEM0_TEST_STORE=$store MEM0_TEST_DATA=$SERVER_DATA MEM0_SERVER_BIN=$root/target/debug/mem0-server \
    "$mcp_venv/bin/python" tests/mcp/test_mcp.py || status=1
  if [[ $status == 0 ]]; then stop_test_server; else
    grep -E "ERROR|panicked" "$SERVER_DATA/server.log" | head -20 >&2 || true
    stop_test_server KEEP
  fi
done
exit $status
