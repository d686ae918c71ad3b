#!/usr/bin/env bash
# The accelerator check (see bench/device_check.py): run from the repository root.
#   bash bench/device_check.sh          # on the GPU/TPU machine, about 6-8 minutes
#   bash bench/device_check.sh --dry    # on CPU at toy sizes, to test the script
# Needs JAX (with CUDA or TPU support), flax and optax; uses this checkout, not an installed copy.
# The package also imports fastcore (pure Python). A machine without network that lacks it gets it
# from .device_deps/ at the repository root, made beforehand on a machine with network (and carried):
#   python -m pip install --no-deps --target .device_deps fastcore
# (add transformers tokenizers huggingface_hub safetensors for the demo part; it is skipped without).
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" TOKENIZERS_PARALLELISM=false
[ -d .device_deps ] && export PYTHONPATH="$PYTHONPATH:$PWD/.device_deps"
export XLA_PYTHON_CLIENT_PREALLOCATE=${XLA_PYTHON_CLIENT_PREALLOCATE:-false}
for m in jax flax optax numpy fastcore; do
  "$PY" -c "import $m" 2>/dev/null || { echo "device_check: python module '$m' is missing ($PY)"; exit 2; }
done
for m in transformers tokenizers; do
  "$PY" -c "import $m" 2>/dev/null || echo "device_check: note: '$m' is not installed"
done
exec "$PY" bench/device_check.py "$@"
