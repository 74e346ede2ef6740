#!/usr/bin/env bash
# Prints the path of a Chromium for the dashboard's browser test (tests/ui/), installing Debian's
# `chromium` package when there is none and this user may (root, or password-less sudo).
# MEM0_CHROMIUM names another executable.
set -euo pipefail
if [[ -n ${MEM0_CHROMIUM:-} ]]; then echo "$MEM0_CHROMIUM"; exit 0; fi
for name in chromium chromium-browser; do
  if command -v "$name" >/dev/null; then command -v "$name"; exit 0; fi
done
if [[ $(id -u) == 0 ]]; then
  apt_get=(apt-get)
elif sudo -n true 2>/dev/null; then
  apt_get=(sudo -n apt-get)
else
  echo "no chromium: install Debian's chromium package (apt-get install chromium) or set MEM0_CHROMIUM" >&2
  exit 1
fi
echo "installing chromium (for the dashboard's browser test)" >&2
"${apt_get[@]}" update -qq >&2 || true
DEBIAN_FRONTEND=noninteractive "${apt_get[@]}" install -y -qq chromium >&2
command -v chromium
