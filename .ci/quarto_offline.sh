#!/usr/bin/env bash
# A `quarto` command for machines that reach package registries (PyPI, npm) but not GitHub
# releases, where `pip install quarto-cli` fails (its setup.py downloads the release tarball).
#
#   bash .ci/quarto_offline.sh QUARTO_SRC [PREFIX]
#
# QUARTO_SRC: a checkout of quarto-cli at v1.7.34, the last release whose src/vendor/ holds every
# Deno dependency (later releases fetch them from deno.land/jsr.io at configure time). PREFIX
# (default ~/.cache/quarto-offline) receives the tools and bin/quarto, a wrapper that runs
# src/quarto.ts on Deno from PyPI (`deno`), with pandoc from PyPI (`pypandoc-binary`) and
# dart-sass and esbuild from npm. Then: PATH=PREFIX/bin:$PATH python .ci/docs.py
# Only HTML is rendered this way (no typst, no deno_dom native plugin: deno_dom's wasm build).
set -euo pipefail
SRC=$(cd "${1:?usage: quarto_offline.sh QUARTO_SRC [PREFIX]}" && pwd)
PREFIX=${2:-$HOME/.cache/quarto-offline}
PY=${PYTHON:-python3}
HERE=$(cd "$(dirname "$0")" && pwd)
if [ ! -f "$SRC/src/quarto.ts" ] || [ ! -d "$SRC/src/vendor" ]; then
  echo "$SRC: no src/quarto.ts or src/vendor/ (a quarto-cli v1.7.34 checkout is needed)"; exit 1
fi
mkdir -p "$PREFIX/tools" "$PREFIX/bin" && cd "$PREFIX/tools"
"$PY" -m pip download -q --no-deps --only-binary :all: --platform manylinux_2_17_x86_64 \
    --platform manylinux1_x86_64 -d wheels deno==2.4.5 pypandoc-binary==1.15
for w in wheels/*.whl; do "$PY" -m zipfile -e "$w" .; done
npm pack -s sass-embedded-linux-x64@1.85.1 @esbuild/linux-x64@0.19.12 >/dev/null
for t in sass-embedded-linux-x64-1.85.1.tgz esbuild-linux-x64-0.19.12.tgz; do
  mkdir -p "${t%.tgz}" && tar xzf "$t" -C "${t%.tgz}"
done
DENO=$PWD/deno-2.4.5.data/scripts/deno PANDOC=$PWD/pypandoc/files/pandoc
SASS=$PWD/sass-embedded-linux-x64-1.85.1/package/dart-sass/sass
ESBUILD=$PWD/esbuild-linux-x64-0.19.12/package/bin/esbuild
chmod +x "$DENO" "$PANDOC" "$SASS" "${SASS%/sass}/src/dart" "$ESBUILD"
# one import map: the source's bare names resolved through src/vendor's map to vendored files
"$PY" "$HERE/quarto_import_map.py" "$SRC/src"
cat > "$PREFIX/bin/quarto" <<EOF
#!/usr/bin/env bash
export QUARTO_ROOT=$SRC QUARTO_BIN_PATH=$SRC/package/dist/bin QUARTO_SHARE_PATH=$SRC/src/resources/
export QUARTO_PANDOC=$PANDOC QUARTO_DART_SASS=$SASS QUARTO_ESBUILD=$ESBUILD QUARTO_DENO=$DENO
export DENO_DIR=$PREFIX/deno_cache DENO_NO_UPDATE_CHECK=1 DENO_TLS_CA_STORE=system,mozilla
if [ "\${1:-}" == "--version" ]; then echo 1.7.34; exit 0; fi
exec $DENO run --unstable-ffi --unstable-kv --no-config --no-lock --allow-all --no-check \\
  --v8-flags=--enable-experimental-regexp-engine,--max-old-space-size=8192 \\
  --importmap=$SRC/src/merged_import_map.json $SRC/src/quarto.ts "\$@"
EOF
chmod +x "$PREFIX/bin/quarto"
mkdir -p "$SRC/package/dist/bin"
echo "quarto: $PREFIX/bin/quarto"
