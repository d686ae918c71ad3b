#!/bin/bash
# Issue 41: the calculator demo's task trained with engine.kind=sglang and with engine.kind=jax, same
# preset (calculator_sglang: the tiny Qwen2 with 2 heads of 128) and seed; shortened from the demo
# (grpo.steps=8, tasks.n_heldout=64, eval.n_greedy=32; the warm start as in the demo).
# Held-out success before/after: <out>/m_<kind>/summary.json; episodes/s: episodes / time_collect_s
# per row of <out>/m_<kind>/grpo/metrics.jsonl (sglang rows also carry the per-push greedy check).
# Usage: JAX_PLATFORMS=cpu bench/sglang_vs_jax.sh [OUT_DIR] [SEED]
set -e
OUT=${1:-runs/sglang_vs_jax}
SEED=${2:-0}
SHORT="seed=$SEED grpo.steps=8 tasks.n_heldout=64 eval.n_greedy=32 log.progress=false"
for kind in sglang jax; do
  tunix-agentic train calculator_sglang engine.kind=$kind $SHORT log.output_dir=$OUT/m_$kind
done
