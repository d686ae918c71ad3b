#!/usr/bin/env bash
# The accelerator check (see bench/device_check.py): run from the repository root.
#   bash bench/device_check.sh          # on the GPU/TPU machine: about 7 min on one H100
#   bash bench/device_check.sh --dry    # on CPU at toy sizes, to test the script
# Needs JAX (with CUDA or TPU support), flax and optax; uses this checkout, not an installed copy.
# The package also imports fastcore, and the demo needs transformers, tokenizers, omegaconf...: a
# machine without network gets them as wheels made beforehand on one with network and carried:
#   python bench/device_deps.py download .device_wheels     (25 MiB, CPython 3.10-3.13)
# and this script unpacks the missing ones into .device_deps/ (the demo is skipped without them).
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" TOKENIZERS_PARALLELISM=false
# wheels carried from a machine with network (python bench/device_deps.py download .device_wheels):
# unpack the ones this interpreter lacks (and CI's tokenizer stack), first on the path
if [ -d .device_wheels ] && [ ! -d .device_deps ]; then
  "$PY" bench/device_deps.py install .device_wheels .device_deps || exit 2
fi
[ -d .device_deps ] && export PYTHONPATH="$PWD:$PWD/.device_deps${PYTHONPATH#$PWD}"
export XLA_PYTHON_CLIENT_PREALLOCATE=${XLA_PYTHON_CLIENT_PREALLOCATE:-false}
for m in jax flax optax numpy fastcore; do
  "$PY" -c "import $m" 2>/dev/null || { echo "device_check: python module '$m' is missing ($PY)"; exit 2; }
done
for m in transformers tokenizers; do
  "$PY" -c "import $m" 2>/dev/null || echo "device_check: note: '$m' is not installed"
done
exec "$PY" bench/device_check.py "$@"
