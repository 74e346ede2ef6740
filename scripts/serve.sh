#!/usr/bin/env bash
# Runs mem0-server on the embedded default (SQLite in ./data, local MiniLM embedder):
# no external service. Fetches the model on first use. Extra arguments go to the server.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/fetch-model.sh
exec cargo run --release --locked -p mem0-server -- "$@"
