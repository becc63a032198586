#!/usr/bin/env bash
# A few verl steps of configs/verl/smollm2-1gpu.yaml on one GPU (docs/scale-out.md). Needs the verl extra
# plus a rollout server build for the GPU (vLLM or SGLang, installed with the machine's CUDA torch), and the
# shared data. Not run through yet: the one GPU lent so far could not be given vLLM and ray (docs/scale-out.md).
#   STEPS=3 PY=python bash scripts/gpu_smoke_verl.sh
set -euo pipefail
PY=${PY:-python}
STEPS=${STEPS:-3}
OUT=${OUT:-runs/verl-smoke}
CONFIG=${CONFIG:-configs/verl/smollm2-1gpu.yaml}
export PYTHONPATH="src${PYTHONPATH:+:$PYTHONPATH}"

"$PY" -c "import verl, torch; assert torch.cuda.is_available(), 'no CUDA device'; print('verl', verl.__version__, 'torch', torch.__version__)"
"$PY" -c "import vllm" 2>/dev/null || "$PY" -c "import sglang" || { echo "install vllm or sglang for the GPU first"; exit 1; }
mkdir -p "$OUT"
CLI=("$PY" -c 'from toolorchestra.cli.main import main; main()')
"${CLI[@]}" verl prepare --env replay:routerbench --config "$CONFIG" --out "$OUT/data" --max-test-tasks 16
"${CLI[@]}" verl train --config "$CONFIG" --data "$OUT/data" --steps "$STEPS" > "$OUT/command.sh"
cat "$OUT/command.sh"
start=$(date +%s)
eval "$(cat "$OUT/command.sh") trainer.default_local_dir=$OUT/checkpoints trainer.save_freq=1000" 2>&1 | tee "$OUT/train.log"
echo "verl: $STEPS steps in $(( $(date +%s) - start )) s (incl. Ray and rollout-server start); per-step timing_s/step in $OUT/train.log"
