#!/usr/bin/env bash
# The paper's generalization evaluations (issue: replay worlds from your own logs), with the shipped
# orchestrator on the first N test tasks: unseen prices (--price-scale) on replay:routerbench, and a pool of
# models it never saw in training (replay:frames: 28 configurations, none of them in RouterBench). Results go to
# out/generalization/; docs/results.md ("Generalization") has the figures.
#   N=150 bash scripts/generalization.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
CLI=${CLI:-.venv/bin/toolorchestra}
N=${N:-150}
OUT=${OUT:-out/generalization}
ORCH=orchestrator:smollm2-135m-orchestrator
run() {  # run NAME ARGS...: one eval into $OUT/NAME (resumes if it was interrupted)
  local name=$1; shift
  OMP_NUM_THREADS=1 $CLI eval --policy $ORCH --tools answer --max-turns 1 --max-tokens 40 \
    --concurrency 8 --no-progress --out "$OUT/$name" "$@"
}
for pref in accuracy cost; do
  run rb-catalog-$pref --env replay:routerbench --split test --limit "$N" --prefer $pref
  # gpt-4 at 1/20 of its price: a price-aware router should send more to it, above all under "low cost".
  run rb-gpt4-x0.05-$pref --env replay:routerbench --split test --limit "$N" --prefer $pref \
    --price-scale gpt-4=0.05
  # Yi-34B, its favourite label, at 20 times its price.
  run rb-yi34b-x20-$pref --env replay:routerbench --split test --limit "$N" --prefer $pref \
    --price-scale yi-34b=20
  # Unseen models: the FRAMES pool (28 configurations) on FRAMES questions.
  run frames-$pref --env replay:frames --split test --limit "$N" --prefer $pref
done
$PY scripts/label_table.py "$OUT"
