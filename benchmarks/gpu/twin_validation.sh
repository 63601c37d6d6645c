#!/usr/bin/env bash
# The GPU server's twin, fitted and validated on one H200 (issue 35, item 4):
#
#   bash benchmarks/gpu/twin_validation.sh RESULTS_DIR                 # from the root of a git clone, one H200
#   CPU_SMOKE=1 SERVER_PYTHON=PY bash benchmarks/gpu/twin_validation.sh RESULTS_DIR   # the same flow on a CPU
#
# Runs benchmarks/twin_validation.py --servers gpu: the pilot (benchmarks/twin/gpu_pilot.yaml, 16 launches: 8 configurations x 2), the
# fit, the held-out predictions (written before the held-out run), the held-out run (gpu_heldout.yaml, 6
# launches), the comparison. The server is benchmarks/twin/gpu_twin.yaml: Llama-1B shape, random bf16 weights,
# --torch-compile-mode none (no Inductor compile at start-up), CUDA graphs captured at 1, 2, 4, 8, 16.
# Expected: about 400 s of device time (22 launches of 15-18 s each: start-up, 18 short requests); every step is
# bounded and the whole at 540 s (TIMEOUT_S; a CPU smoke on a loaded 2-core machine takes about 500 s). Writes under RESULTS_DIR (well under 1 MB):
#   validation.json            the GPU row (docs/results/twin/validation.json's "gpu" row; commit it there)
#   env.txt                    the machine as found (nvidia-smi, torch, uptime)
#   twin.yaml, predictions.json, load.json     the fitted twin, its held-out predictions, the host's load
#   pilot/, heldout/           each run's trials.jsonl and verdict.json
#   log.txt                    the benchmark's output
set -uo pipefail
RESULTS=${1:?usage: benchmarks/gpu/twin_validation.sh RESULTS_DIR}
mkdir -p "$RESULTS"
RESULTS=$(cd "$RESULTS" && pwd)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
# compile caches in /tmp: any launch after the first finds them warm (the server compiles nothing in this
# configuration, but torch's own kernels may)
export TORCHINDUCTOR_CACHE_DIR=/tmp/twin_inductor_cache TRITON_CACHE_DIR=/tmp/twin_triton_cache
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
WORK=/tmp/twin_validation_work
rm -rf "$WORK"
ARGS=(--servers gpu --keep "$WORK" --out "$RESULTS/validation.json")
[ "${CPU_SMOKE:-0}" = 1 ] && ARGS+=(--cpu-smoke)
[ -n "${SERVER_PYTHON:-}" ] && ARGS+=(--server-python "$SERVER_PYTHON")
{
  echo "# $(date -u +%FT%TZ) $(git rev-parse HEAD 2>/dev/null || echo 'no git work tree')"
  timeout 20 nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.max.sm,power.limit,temperature.gpu --format=csv
  timeout 20 python3 -c 'import torch, platform; print("python", platform.python_version(), "torch", torch.__version__, "cuda", torch.version.cuda, "gpus", torch.cuda.device_count())'
  uptime; nproc
} > "$RESULTS/env.txt" 2>&1
cat "$RESULTS/env.txt"

keep() {  # what the runs left, small files only, whatever stage a timeout stopped them at
  local w=$WORK/gpu
  for f in twin.yaml predictions.json load.json; do [ -f "$w/$f" ] && cp "$w/$f" "$RESULTS/"; done
  for d in "$w"/outputs/*/*; do
    [ -d "$d" ] || continue
    local name=pilot; case "$d" in *gpu_heldout) name=heldout ;; esac
    mkdir -p "$RESULTS/$name"
    for f in trials.jsonl verdict.json; do [ -f "$d/$f" ] && cp "$d/$f" "$RESULTS/$name/"; done
  done
}
trap keep EXIT
LIMIT=${TIMEOUT_S:-540}
timeout -k 10 "$LIMIT" python3 benchmarks/twin_validation.py "${ARGS[@]}" 2>&1 | tee "$RESULTS/log.txt"
rc=${PIPESTATUS[0]}
echo "twin_validation.py exit $rc ($( [ "$rc" = 124 ] && echo "ran past $LIMIT s" || echo done ))"
exit "$rc"
