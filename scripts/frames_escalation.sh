#!/usr/bin/env bash
# The FRAMES escalation orchestrator end to end (docs/results.md, "FRAMES v2: consult, read, adopt or
# escalate"): train on replay:frames with escalation targets in two stages (frames-escalation.yaml, 15 steps;
# frames-escalation-reading.yaml, 24 steps from its last checkpoint), average the last three checkpoints, ship the
# adapter as smollm2-135m-frames-escalation, evaluate it greedily on the 412 test questions under both
# preferences (expert and answer tools, at most 4 turns), export its decisions beside the baselines in
# results/frames/ and check its points against every baseline.
#   bash scripts/frames_escalation.sh            # STAGES="train export eval check" by default
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
CLI=${CLI:-.venv/bin/toolorchestra}
RUN=runs/frames-escalation-reading
NAME=smollm2-135m-frames-escalation
OUT=${OUT:-out/frames-escalation}
LIMIT=${LIMIT:-}
STAGES=${STAGES:-train export eval check}
for stage in $STAGES; do
  case $stage in
    train)
      $CLI train --config configs/train/frames-escalation.yaml --quiet
      $CLI train --config configs/train/frames-escalation-reading.yaml --quiet ;;
    export)
      $PY scripts/average_checkpoints.py $RUN/avg_8_12_16 \
        $RUN/checkpoints/step_8 $RUN/checkpoints/step_12 $RUN/checkpoints/step_16
      $CLI export-orchestrator $RUN/avg_8_12_16 --out src/toolorchestra/data/orchestrators/$NAME \
        --card configs/train/frames-escalation.md ;;
    eval)
      # the two preferences side by side, one core each
      for pref in accuracy cost; do
        OMP_NUM_THREADS=1 $CLI eval --policy orchestrator:$NAME --env replay:frames --split test \
          --tools expert,answer --max-turns 4 --max-tokens 40 --concurrency 8 --no-progress --prefer $pref \
          ${LIMIT:+--limit $LIMIT} --out $OUT/$pref &
      done
      wait ;;
    check)
      $CLI export-results $OUT/accuracy $OUT/cost --out results/frames
      $PY scripts/check_decisions.py results/frames --data-dir ../shared/data
      $PY scripts/check_pareto.py results/frames || true ;;
    *) echo "unknown stage $stage (train, export, eval, check)" >&2; exit 2 ;;
  esac
done
