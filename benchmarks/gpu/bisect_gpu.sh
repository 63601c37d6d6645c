#!/usr/bin/env bash
# Bisect the GPU server's own history on one H200 (issue 36, item 5b): which commit of framework/servers/gpu/ moved
# the batch-1 decode step. Run from the root of a git clone of the merged tree WITH full history:
#
#     bash benchmarks/gpu/bisect_gpu.sh RESULTS_DIR          # on the H200 (CUDA)
#     bash benchmarks/gpu/bisect_gpu.sh RESULTS_DIR cpu      # a dry run here: --device cpu, the tiny shape, 3 commits
#
# Versions: the commits that touched framework/servers/gpu/ (git rev-list --reverse --topo-order HEAD --
# framework/servers/gpu), oldest first; the good end is the oldest (before the fused path: the slow step), the bad
# end the newest (the fused path, overlap scheduler and split-K of 0.3.0: the fast step). Each launch starts the
# server from a git worktree of its commit (the framework makes and removes them under the run directory). Every
# flag passed exists at every commit of the range (checked below against `git show C:framework/servers/gpu/args.py`).
# Compile caches live in /tmp (TORCHINDUCTOR_CACHE_DIR, TRITON_CACHE_DIR), shared by the launches of one commit.
#
# Expected seconds on one H200: about 280 (GPU). The bisection stops launching at its registered max_seconds (200;
# each launch of a fused commit compiles on a cold cache, 30-70 s) and records "stopped" if that comes first; the
# whole framework call is bounded by `timeout 285`, the audit and report by `timeout 60` each.
# Writes RESULTS_DIR/{gpu_bisect.yaml, gpu_bisect_experiment.yaml, verdicts.jsonl, run/bisect.json, run/bisect.md,
# run/bisect.png, run/trials.jsonl, audit.txt, bisect.log} (under a MB; the server logs stay in run/logs, small).
set -euo pipefail
RESULTS=${1:?usage: bisect_gpu.sh RESULTS_DIR [cpu]}
MODE=${2:-gpu}
cd "$(dirname "$0")/../.."
mkdir -p "$RESULTS"
RESULTS=$(cd "$RESULTS" && pwd)
export TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-/tmp/bisect-gpu-inductor}
export TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-/tmp/bisect-gpu-triton}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

REPO_REL=$(python -c 'import os,sys; print(os.path.relpath(sys.argv[1], sys.argv[2]))' "$PWD" "$RESULTS")
mapfile -t COMMITS < <(git rev-list --reverse --topo-order HEAD -- framework/servers/gpu)
[ "${#COMMITS[@]}" -ge 3 ] || { echo "need the clone's full history: ${#COMMITS[@]} commits touch framework/servers/gpu" >&2; exit 2; }
if [ "$MODE" = cpu ]; then
  COMMITS=("${COMMITS[0]}" "${COMMITS[$(( ${#COMMITS[@]} / 2 ))]}" "${COMMITS[-1]}")
  MODEL=tiny; DEVICE=(--device, cpu); THRESHOLD=0.10; MAX_S=150; OUT_TOKENS=16
else
  MODEL=llama-1b; DEVICE=(--device, cuda); THRESHOLD=0.10; MAX_S=200; OUT_TOKENS=64
fi
FLAGS=(--context-length --max-running-requests --cuda-graph-max-bs --device)
for c in "${COMMITS[@]}"; do
  for f in "${FLAGS[@]}"; do
    git show "$c:framework/servers/gpu/args.py" | grep -q -- "\"$f\"" || { echo "commit $c: args.py has no $f" >&2; exit 2; }
  done
done

cat > "$RESULTS/gpu_bisect_experiment.yaml" <<YAML
name: gpu_bisect_experiment
description: the GPU server at batch 1 with only flags every commit of framework/servers/gpu accepts
model_path: $MODEL
tp_size: 1
flags: gpu
server_args: [--context-length, "512", --max-running-requests, "8", --cuda-graph-max-bs, "8", ${DEVICE[*]}]
workload: {prompt_tokens: 32, output_tokens: $OUT_TOKENS, concurrency: 1, temperature: 0.0, ignore_eos: true,
           request_timeout_s: 120}
YAML
{
  cat <<YAML
name: gpu_bisect
statement: >
  Among the ${#COMMITS[@]} commits that touched framework/servers/gpu, the first whose batch-1 decode throughput
  differs by 10% or more from its predecessor's is named, under alpha 0.05.
experiment: gpu_bisect_experiment.yaml
metric: decode_tok_s
bisect:
  threshold: $THRESHOLD
  repo: $REPO_REL
  launches: 2
  block: 1
  max_launches: 4
  max_failures: 2
  max_seconds: $MAX_S
  versions:
YAML
  for c in "${COMMITS[@]}"; do echo "    - {name: ${c:0:10}, commit: $c}"; done
  cat <<YAML
design: {requests: 3, warmup: 1, seed: 20261202}
YAML
} > "$RESULTS/gpu_bisect.yaml"

cd "$RESULTS"
set +e
timeout 285 python -m framework bisect hypothesis=gpu_bisect.yaml backend=gpu run_dir=run ledger=verdicts.jsonl \
  progress=false 2>&1 | tee "$RESULTS/bisect.log"
rc=${PIPESTATUS[0]}
timeout 60 python -m framework audit ledger=verdicts.jsonl > "$RESULTS/audit.txt" 2>&1
echo "bisect exit $rc; audit exit $?" | tee -a "$RESULTS/audit.txt"
rm -rf "$RESULTS/run/worktrees"
exit "$rc"
