#!/bin/bash
# `tunix-agentic train` as two jax.distributed CPU processes (one device each, gloo) against one
# process, on the same tiny run; then both resumed for one more GRPO step; prints wall times and
# the max abs difference of the saved models' params, and each run's collection seconds per step (each
# of the two processes collects only its share of a step's groups). About 10 minutes on 2 CPU cores.
#   JAX_PLATFORMS=cpu bash bench/two_process_train.sh [/tmp/two_process_train]
set -e
ROOT=${1:-/tmp/two_process_train}
export JAX_PLATFORMS=cpu TUNIX_AGENTIC_JAX_CACHE=0
OV="sft.n_demos=16 sft.batch=4 tasks.n_heldout=2 eval.n_greedy=1 log.tensorboard=false
    checkpoint.save_every=1"
one() {  # one process: OUT STEPS
  tunix-agentic train calculator_quick $OV grpo.steps=$2 log.output_dir=$1 > $1.log 2>&1
}
two() {  # two processes: OUT STEPS
  local port=$((20000 + RANDOM % 20000))
  for i in 0 1; do
    TUNIX_AGENTIC_COORDINATOR=127.0.0.1:$port TUNIX_AGENTIC_NUM_PROCESSES=2 \
      TUNIX_AGENTIC_PROCESS_ID=$i tunix-agentic train calculator_quick $OV grpo.steps=$2 \
      sharding.data=-1 log.output_dir=$1 > $1.p$i.log 2>&1 &
  done
  wait
}
timed() { local s=$(date +%s); "$@"; echo "$* : $(( $(date +%s) - s )) s"; }
rm -rf $ROOT && mkdir -p $ROOT
timed one $ROOT/one 2
timed two $ROOT/two 2
python - $ROOT <<'PY'
import json, sys, numpy as np
from safetensors.numpy import load_file
a, b = (load_file(f'{sys.argv[1]}/{d}/model/model.safetensors') for d in ('one', 'two'))
print('2 GRPO steps: max abs param difference, two processes vs one:',
      max(float(np.abs(a[k] - b[k]).max()) for k in a))
for d in ('one', 'two', 'two/process_1'):  # each of the two collects its share, then all are shared
    rs = [json.loads(l) for l in open(f'{sys.argv[1]}/{d}/grpo/metrics.jsonl')]
    print(f'{d}: episodes trained per step', [r['episodes'] for r in rs], '; collect s per step',
          [round(r['time_collect_s'], 1) for r in rs])
PY
timed two $ROOT/two 3  # resumes from the checkpoint both processes wrote
timed one $ROOT/one 3
python - $ROOT <<'PY'
import json, sys, numpy as np
from safetensors.numpy import load_file
a, b = (load_file(f'{sys.argv[1]}/{d}/model/model.safetensors') for d in ('one', 'two'))
steps = [json.loads(l)['step'] for l in open(f'{sys.argv[1]}/two/grpo/metrics.jsonl')]
print('resumed to 3 steps: metrics steps', steps, '; max abs param difference:',
      max(float(np.abs(a[k] - b[k]).max()) for k in a))
PY
