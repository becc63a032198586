#!/usr/bin/env bash
# The whole loop on replay:routerbench test (945 prompts, 11 recorded models), on the first LIMIT test tasks:
#   1. every baseline policy (seconds each),
#   2. the shipped trained orchestrator (SmolLM2-135M + the routing adapter in
#      src/toolorchestra/data/orchestrators/smollm2-135m-orchestrator) on the same test tasks, once per
#      preference in ORCH_PREFS: it reads the question and the stated preference and names the model to answer,
#   3. the reader (`--policy reader`, agent/reader.py) on the same tasks, once per preference: it decides from each
#      label's price and measured profile, never its name (the embedded SmolLM2 reads only the question),
#   4. the report: comparison table (printed), accuracy-vs-cost Pareto plot, preference adherence, usage chart.
# Rerunning resumes: finished runs and episodes are not redone (delete $OUT to start over).
#
# Settings (environment variables):
#   PY           python of the venv with toolorchestra installed (default .venv/bin/python)
#   OUT          output dir (default out/demo)
#   TOOLORCHESTRA_DATA  shared data dir (default ../shared/data)
#   ORCH         orchestrator model (default smollm2-135m-orchestrator, the trained one; smollm2-135m is the
#                untrained embedded model)
#   LIMIT        first test tasks every policy runs on (default 200, about 3 minutes per orchestrator run; empty =
#                all 945, as in results/routerbench); ORCH_PREFS preferences (default "accuracy cost")
#   ORCH_TOOLS   tools it is offered (default answer: it names the model that answers), ORCH_TURNS (1),
#   ORCH_TOKENS (40), ORCH_CONCURRENCY (4)
#   READER       the reader policy to run too (default reader; empty skips it)
set -euo pipefail
cd "$(dirname "$0")/.."

PY="${PY:-.venv/bin/python}"
OUT="${OUT:-out/demo}"
ORCH="${ORCH:-smollm2-135m-orchestrator}"
LIMIT="${LIMIT-200}"
ORCH_PREFS="${ORCH_PREFS:-accuracy cost}"
ORCH_TOOLS="${ORCH_TOOLS:-answer}"
ORCH_TURNS="${ORCH_TURNS:-1}"
ORCH_TOKENS="${ORCH_TOKENS:-40}"
ORCH_CONCURRENCY="${ORCH_CONCURRENCY:-4}"
READER="${READER-reader}"
ENV_NAME="replay:routerbench"

if [ ! -x "$PY" ]; then
  echo "demo: no python at $PY (run 'make setup' or set PY)" >&2
  exit 2
fi
toolorchestra() { "$PY" -c 'from toolorchestra.cli.main import main; main()' "$@"; }
slug() { printf '%s' "$1" | tr ':/' '__'; }

limit_args=(); scope="all test tasks"
if [ -n "$LIMIT" ]; then limit_args=(--limit "$LIMIT"); scope="the first $LIMIT test tasks"; fi
started=$(date +%s)
echo "== baselines on $ENV_NAME, $scope"
MODELS=(gpt-4-1106-preview gpt-3.5-turbo-1106 claude-v1 claude-v2 claude-instant-v1 meta/llama-2-70b-chat
        meta/code-llama-instruct-34b-chat mistralai/mixtral-8x7b-chat mistralai/mistral-7b-chat
        zero-one-ai/Yi-34B-Chat WizardLM/WizardLM-13B-V1.2)
POLICIES=()
for model in "${MODELS[@]}"; do POLICIES+=("single:$model"); done
POLICIES+=(random cheapest per-subtask cascade router oracle)
mkdir -p "$OUT/runs" "$OUT/logs"
for policy in "${POLICIES[@]}"; do
  run_dir="$OUT/runs/$(slug "$policy")"
  log="$OUT/logs/$(slug "$policy").log"
  if [ -f "$run_dir/metrics.json" ]; then echo "   $policy: done"; continue; fi
  echo "   $policy"
  toolorchestra eval --env "$ENV_NAME" --split test --policy "$policy" "${limit_args[@]}" --out "$run_dir" \
    --no-progress > "$log" 2>&1 \
    || { cat "$log" >&2; exit 1; }
done
echo "   baselines took $(( $(date +%s) - started ))s"

for pref in $ORCH_PREFS; do
  echo "== orchestrator $ORCH, --prefer $pref, on $scope"
  orch_started=$(date +%s)
  toolorchestra eval --env "$ENV_NAME" --split test --policy "orchestrator:$ORCH" "${limit_args[@]}" --prefer "$pref" \
    --tools "$ORCH_TOOLS" --max-turns "$ORCH_TURNS" --max-tokens "$ORCH_TOKENS" --concurrency "$ORCH_CONCURRENCY" \
    --out "$OUT/runs/$(slug "orchestrator:$ORCH")_$pref"
  echo "   took $(( $(date +%s) - orch_started ))s"
done

if [ -n "$READER" ]; then
  for pref in $ORCH_PREFS; do
    echo "== $READER, --prefer $pref, on $scope (the first run reads the questions first)"
    reader_started=$(date +%s)
    toolorchestra eval --env "$ENV_NAME" --split test --policy "$READER" "${limit_args[@]}" --prefer "$pref" \
      --no-progress --out "$OUT/runs/$(slug "$READER")_$pref"
    echo "   took $(( $(date +%s) - reader_started ))s"
  done
fi

echo "== report"
toolorchestra report "$OUT/runs" --out "$OUT/report"
# The orchestrator's points beside every baseline (frontier = no other run, oracle aside, beats it on both).
sed -n '/^## Comparison/,/^## Sweeps/p' "$OUT/report/report.md" | grep -v '^## Sweeps'
echo "demo finished in $(( $(date +%s) - started ))s; open $OUT/report/report.html"
