#!/usr/bin/env bash
# Re-fetches the API docs UI served at /docs (Swagger UI, from the npm package swagger-ui-dist)
# into crates/mem0-server/assets/swagger-ui/, where the files are committed and compiled into
# the binary: the docs page works offline and never loads anything at run time.
# Usage: scripts/fetch-docs-ui.sh            (checks the pinned version and its checksums)
set -euo pipefail
cd "$(dirname "$0")/.."
version=5.35.0
tarball_sha256=1b8e891893404ea4c3558b6a87e2a3e494e7eedba41168c2ece5800a391a6ea6
dest=crates/mem0-server/assets/swagger-ui
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
curl -fsSL "https://registry.npmjs.org/swagger-ui-dist/-/swagger-ui-dist-$version.tgz" -o "$work/ui.tgz"
echo "$tarball_sha256  $work/ui.tgz" | sha256sum -c --quiet
tar -xzf "$work/ui.tgz" -C "$work"
mkdir -p "$dest"
for file in swagger-ui-bundle.js swagger-ui-bundle.js.LICENSE.txt swagger-ui.css LICENSE NOTICE; do
  cp "$work/package/$file" "$dest/$file"
done
echo "$version" > "$dest/VERSION"
echo "fetch-docs-ui: swagger-ui-dist $version installed in $dest" >&2
