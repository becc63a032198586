#!/usr/bin/env bash
# Every FRAMES baseline on the first N test questions (replayed: seconds each), into OUT/<policy>/, so that
# scripts/check_pareto.py OUT compares an orchestrator run on the same N questions (link its eval dirs into
# OUT as orchestrator-*) with each baseline on exactly those questions.
#   bash scripts/frames_subset_baselines.sh N OUT
# ENV=replay:frames-dev runs them on FRAMES' dev world instead (docs/replay.md, "Dev worlds").
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:?usage: frames_subset_baselines.sh N OUT}
OUT=${2:?usage: frames_subset_baselines.sh N OUT}
CLI=${CLI:-.venv/bin/toolorchestra}
ENV=${ENV:-replay:frames}
policies=(random cheapest per-subtask cascade oracle)
for model in $(ls ../shared/data/frames/models | sed 's/\.jsonl$//'); do policies+=("single:$model"); done
for threshold in 0 0.01 0.02 0.05 0.1 0.15 0.2 0.3 0.5 1 2 5 10; do policies+=("router:$threshold"); done
mkdir -p "$OUT"
for policy in "${policies[@]}"; do
  dir="$OUT/$(printf '%s' "$policy" | tr ':/' '--')"
  [ -f "$dir/metrics.json" ] && continue
  $CLI eval --env "$ENV" --split test --policy "$policy" --limit "$N" --out "$dir" --no-progress > /dev/null
done
echo "$(ls "$OUT" | wc -l) baseline dirs in $OUT"
