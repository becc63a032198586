#!/usr/bin/env bash
# The FRAMES orchestrator end to end (docs/results.md, "FRAMES: a trained orchestrator"): train on
# replay:frames-typed, average the last three checkpoints, ship the adapter as smollm2-135m-frames-orchestrator,
# evaluate it greedily on the 412 test questions under both preferences, export its decisions beside the
# baselines in results/frames/ and check its points against every baseline.
#   bash scripts/frames_orchestrator.sh            # STAGES="train export eval check" by default
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
CLI=${CLI:-.venv/bin/toolorchestra}
RUN=runs/frames-outcome-model
NAME=smollm2-135m-frames-orchestrator
OUT=${OUT:-out/frames-orchestrator}
STAGES=${STAGES:-train export eval check}
for stage in $STAGES; do
  case $stage in
    train)
      $CLI train --config configs/train/frames-outcome-model.yaml --quiet ;;
    export)
      $PY scripts/average_checkpoints.py $RUN/avg_50_55_60 \
        $RUN/checkpoints/step_50 $RUN/checkpoints/step_55 $RUN/checkpoints/step_60
      $CLI export-orchestrator $RUN/avg_50_55_60 --out src/toolorchestra/data/orchestrators/$NAME \
        --card configs/train/frames-outcome-model.md ;;
    eval)
      for pref in accuracy cost; do
        OMP_NUM_THREADS=1 $CLI eval --policy orchestrator:$NAME --env replay:frames-typed --split test \
          --tools answer --max-turns 1 --max-tokens 40 --concurrency 8 --no-progress --prefer $pref \
          --out $OUT/$pref
      done ;;
    check)
      $CLI export-results $OUT/accuracy $OUT/cost --out results/frames
      $PY scripts/check_decisions.py results/frames --data-dir ../shared/data
      $PY scripts/check_pareto.py results/frames || true ;;
    *) echo "unknown stage $stage (train, export, eval, check)" >&2; exit 2 ;;
  esac
done
