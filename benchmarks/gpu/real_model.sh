#!/usr/bin/env bash
# Issue 34, item 4: the real SmolLM2-135M model on the project's GPU server, one H200, registered records.
#
#   SMOLLM2_GGUF=/path/SmolLM2-135M-Instruct.Q4_1.gguf bash benchmarks/gpu/real_model.sh RESULTS_DIR
#
# Run from the root of a git clone of the tree (records name the commit). Expected: about 250 s on one
# H200 (conversion ~20 s; gpu_smollm2_fused_outputs, 6 launches, ~100 s with the fused path's first compile;
# gpu_smollm2_ngram, 12 launches, ~120 s), not measured yet. Every step is bounded by `timeout`: 45 + 125 +
# 130 s (LIMIT_FUSED, LIMIT_NGRAM override the last two), so at most 300 s plus the audit. A run cut by its
# limit keeps its launches and says `resume=...`: a second call with RESUME_FUSED / RESUME_NGRAM set to those
# run directories finishes it instead of starting again.
# 1. the GGUF is checked (size and sha256, framework.assets.smollm2 through FRAMEWORK_SMOLLM2_GGUF) and
#    converted to a Hugging Face directory in bf16 (framework.assets.smollm2_hf) in $FRAMEWORK_CACHE_DIR
#    (default /tmp/framework-cache; the 270 MB directory stays out of RESULTS_DIR);
# 2. gpu_smollm2_fused_outputs: greedy outputs of the fused decode path against the reference path (the
#    outputs prediction) and the fused path's decode speed-up;
# 3. gpu_smollm2_ngram: NGRAM speculation on a copy workload and on free generation (decode_tok_s), with
#    the accept rate from every response's drafted/accepted counts;
# 4. audit of the ledger. RESULTS_DIR gets: COMMAND.txt (this command, the commit, the GPU's UUID, the
#    model's sha256 and the converted directory's digest), env.txt, conversion.json (the manifest),
#    verdicts.jsonl, runs/<hypothesis>/ (trials and server logs), accept.json, audit.txt. A few MB.
#
# CPU exercise (no GPU; tiny counts), as it was tested before its first GPU run:
#   DEVICE=cpu EXTRA="design.launches=2 design.requests=2 design.warmup=0" HYPOTHESES=/tmp/hyp \
#     SMOLLM2_GGUF=... bash benchmarks/gpu/real_model.sh /tmp/rm
# (HYPOTHESES: a folder with the two hypotheses, e.g. without a prediction kind the tree does not have yet.)
set -uo pipefail
RESULTS=${1:?usage: SMOLLM2_GGUF=FILE benchmarks/gpu/real_model.sh RESULTS_DIR}
: "${SMOLLM2_GGUF:?set SMOLLM2_GGUF to the assembled SmolLM2-135M-Instruct.Q4_1.gguf}"
export FRAMEWORK_SMOLLM2_GGUF=$SMOLLM2_GGUF
export FRAMEWORK_CACHE_DIR=${FRAMEWORK_CACHE_DIR:-/tmp/framework-cache}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
PY=${PYTHON:-python3}
DEVICE=${DEVICE:-cuda}
HYPOTHESES=${HYPOTHESES:-hypotheses}
EXTRA=${EXTRA:-}
mkdir -p "$RESULTS/runs"
t0=$(date +%s)
say() { echo "real_model.sh [$(( $(date +%s) - t0 )) s] $*"; }

{
  echo "# $(date -u +%FT%TZ)"
  if [ "$DEVICE" = cuda ]; then nvidia-smi -L; nvidia-smi --query-gpu=uuid,name,driver_version --format=csv; fi
  "$PY" -c 'import torch, platform; print("python", platform.python_version(), "torch", torch.__version__, "cuda", torch.version.cuda, "gpus", torch.cuda.device_count())'
} > "$RESULTS/env.txt" 2>&1
cat "$RESULTS/env.txt"
if [ "$DEVICE" = cuda ] && ! "$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)'; then
  echo "real_model.sh: no CUDA device visible (DEVICE=cpu exercises the script on a CPU)" >&2; exit 1
fi

say "1/4 checking and converting the GGUF (bf16)"
conv=$(timeout 45 "$PY" -m framework.assets.smollm2_hf --dtype bfloat16 --verify) \
  || { echo "real_model.sh: conversion failed" >&2; exit 1; }
dir=${conv% *}; digest=${conv##* }
cp "$dir/framework-conversion.json" "$RESULTS/conversion.json"
say "converted: $dir (digest $digest)"

# the hypotheses must load in this tree before any server starts (a prediction kind that is not there: exit 2)
for h in gpu_smollm2_fused_outputs gpu_smollm2_ngram; do
  "$PY" - "$HYPOTHESES/$h.yaml" <<'PY' || { echo "real_model.sh: $h does not load here" >&2; exit 2; }
import sys
from pathlib import Path
from framework.core.spec import load_hypothesis
load_hypothesis(Path(sys.argv[1]))
PY
done

run() {  # one registered hypothesis through the framework's normal path (resume=DIR: finish that run)
  local name=$1 limit=$2 resume=${3:-}
  say "running $name (at most $limit s)${resume:+, resuming $resume}"
  # shellcheck disable=SC2086
  timeout -s INT "$limit" "$PY" -m framework run hypothesis="$name" backend=gpu paths.hypotheses="$HYPOTHESES" \
    ledger="$RESULTS/verdicts.jsonl" hydra.run.dir="$RESULTS/runs/$name" progress=false \
    backend.ready_timeout_s=240 ${resume:+resume=$resume} $EXTRA
  local rc=$?
  say "$name: exit $rc"
  return $rc
}
status=0
say "2/4 fused vs reference"
run gpu_smollm2_fused_outputs "${LIMIT_FUSED:-125}" "${RESUME_FUSED:-}" || status=1
say "3/4 NGRAM speculation"
run gpu_smollm2_ngram "${LIMIT_NGRAM:-130}" "${RESUME_NGRAM:-}" || status=1

say "4/4 accept rates and audit"
"$PY" - "$RESULTS/runs/gpu_smollm2_ngram" > "$RESULTS/accept.json" <<'PY'
import json, sys, pathlib, collections
rows = collections.defaultdict(list)
for f in pathlib.Path(sys.argv[1]).rglob("trials.jsonl"):
    for line in f.read_text().splitlines():
        r = json.loads(line)
        if r.get("kind") == "request" and r.get("ok") and not r.get("warmup") and r.get("accept_length") is not None:
            rows[",".join(f"{k}={v}" for k, v in sorted((r.get("levels") or {}).items()))].append(r["accept_length"])
k = 4  # --speculative-num-draft-tokens: 3 drafts + the target's own token per verify pass
out = {c: {"requests": len(v), "mean_accept_length": sum(v) / len(v),
           "accept_rate_per_draft": (sum(v) / len(v) - 1) / (k - 1)} for c, v in sorted(rows.items())}
print(json.dumps(out, indent=1))
PY
cat "$RESULTS/accept.json"
timeout 120 "$PY" -m framework audit ledger="$RESULTS/verdicts.jsonl" > "$RESULTS/audit.txt" 2>&1 || status=1
cat "$RESULTS/audit.txt"
{
  echo "command: SMOLLM2_GGUF=<the assembled GGUF> bash benchmarks/gpu/real_model.sh RESULTS_DIR"
  echo "DEVICE=$DEVICE EXTRA=$EXTRA HYPOTHESES=$HYPOTHESES"
  echo "commit: $(git rev-parse HEAD 2>/dev/null || echo 'no git work tree')"
  if [ "$DEVICE" = cuda ]; then echo "gpu_uuid: $(nvidia-smi --query-gpu=uuid --format=csv,noheader | head -n 1)"; fi
  echo "model: $(basename "$SMOLLM2_GGUF") sha256 $("$PY" -c 'from framework.assets import smollm2; print(smollm2.locate().sha256)')"
  echo "converted: bfloat16 digest $digest"
  echo "seconds: $(( $(date +%s) - t0 ))"
} > "$RESULTS/COMMAND.txt"
cat "$RESULTS/COMMAND.txt"
exit $status
