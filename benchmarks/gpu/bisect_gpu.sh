#!/usr/bin/env bash
# Bisect the GPU server's own history on one H200 (issue 36, item 5b): which commit of framework/servers/gpu/ moved
# the batch-1 decode step. Run from the root of a git clone of the merged tree WITH full history:
#
#     bash benchmarks/gpu/bisect_gpu.sh RESULTS_DIR          # on the H200: three versions (below), one device call
#     bash benchmarks/gpu/bisect_gpu.sh RESULTS_DIR five     # the five decode-path commits of the first record (200 s)
#     bash benchmarks/gpu/bisect_gpu.sh RESULTS_DIR all      # every commit of the path (18; about 600 s: over budget)
#     bash benchmarks/gpu/bisect_gpu.sh RESULTS_DIR cpu      # a dry run here: --device cpu, the tiny shape, 3 commits
#
# Versions, oldest first, from git rev-list --reverse --topo-order HEAD -- framework/servers/gpu: by default the
# good end bff8e99 (the reference forward only: the slow step), ab30b6b (the fused path, the first of the 0.3.0
# decode-path commits) and the bad end, the newest commit of the path (the fast step). Three versions, because the
# first record (`five`: with 8cb0908 the overlap scheduler and 9017a3c the split-K GEMV between) stopped at its
# 200 s budget before the ends were decided: each comparison's anytime-valid test needs at least 6 launches at
# these alphas (docs/statistics.md, section 13), a fused commit's launch takes 21-36 s on a warm compile cache and
# 135 s on a cold one, and the five-version bisection's 28 launches or more do not fit one 10-minute device call
# (about 540 s). Three versions need 18: about 190 s for the ends, 150 s for the probe and two cold compiles.
# `all` bisects all 18 commits. Each launch starts the server from a git worktree of its commit (the framework makes and
# removes them under the run directory). Every flag passed exists at every commit used (checked below against
# `git show C:framework/servers/gpu/args.py`). Compile caches live in /tmp (TORCHINDUCTOR_CACHE_DIR,
# TRITON_CACHE_DIR), shared by all launches.
#
# Expected seconds on one H200 (default): about 450 (GPU): 18 launches, 6-7 s for the good end's, 21-36 s for a
# fused commit's, 135 s for each fused commit's first (cold compile). The bisection starts no launch after its
# registered max_seconds (450; 200 for `five`) and then records "stopped" with what it decided; the framework
# call is bounded by `timeout 540` (290), the audit by `timeout 60`. Writes RESULTS_DIR/{gpu_bisect.yaml, gpu_bisect_experiment.yaml, verdicts.jsonl, run/bisect.json,
# run/bisect.md, run/bisect.png, run/trials.jsonl, run/logs/, audit.txt, bisect.log} (well under a MB).
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
pick() {  # the full hashes of the given prefixes, in the path's order; exit 2 when one is not in the range
  local want=("$@") out=() c p
  for p in "${want[@]}"; do
    c=$(printf '%s\n' "${COMMITS[@]}" | grep "^$p" || true)
    [ -n "$c" ] || { echo "commit $p does not touch framework/servers/gpu in this clone" >&2; exit 2; }
    out+=("$c")
  done
  COMMITS=("${out[@]}")
}
case "$MODE" in
  cpu) pick "${COMMITS[0]:0:12}" "${COMMITS[$(( ${#COMMITS[@]} / 2 ))]:0:12}" "${COMMITS[-1]:0:12}"
       MODEL=tiny; DEVICE="--device, cpu"; MAX_S=150; TIMEOUT=280; OUT_TOKENS=16 ;;
  all) MODEL=llama-1b; DEVICE="--device, cuda"; MAX_S=520; TIMEOUT=590; OUT_TOKENS=64 ;;
  gpu) pick bff8e99 ab30b6b "${COMMITS[-1]:0:12}"
       MODEL=llama-1b; DEVICE="--device, cuda"; MAX_S=450; TIMEOUT=540; OUT_TOKENS=64 ;;
  five) pick bff8e99 ab30b6b 8cb0908 9017a3c "${COMMITS[-1]:0:12}"
       MODEL=llama-1b; DEVICE="--device, cuda"; MAX_S=200; TIMEOUT=290; OUT_TOKENS=64 ;;
  *) echo "mode: gpu (default), all or cpu; got $MODE" >&2; exit 2 ;;
esac
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
server_args: [--context-length, "512", --max-running-requests, "8", --cuda-graph-max-bs, "8", $DEVICE]
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
  threshold: 0.10
  repo: $REPO_REL
  launches: 6
  block: 1
  max_launches: 10
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
timeout "$TIMEOUT" python -m framework bisect hypothesis=gpu_bisect.yaml backend=gpu run_dir=run ledger=verdicts.jsonl \
  progress=false 2>&1 | tee "$RESULTS/bisect.log"
rc=${PIPESTATUS[0]}
timeout 60 python -m framework audit ledger=verdicts.jsonl > "$RESULTS/audit.txt" 2>&1
echo "bisect exit $rc; audit exit $?" | tee -a "$RESULTS/audit.txt"
rm -rf "$RESULTS/run/worktrees"
exit "$rc"
