#!/usr/bin/env bash
# The recipe for real GPU verdicts: run the project's GPU server hypotheses on a lent GPU machine.
#
# Those machines have torch but no package registry: the framework's other dependencies travel as
# wheels (WHEELS, see docs/results/gpu/README.md for the list and how they were fetched), installed
# here with --target. Every stage writes under RESULTS (default docs/results/gpu): the machine's
# description (env/), the ledger (verdicts.jsonl) and one run directory per hypothesis (runs/).
#
#   benchmarks/gpu/run_device.sh WHEELS STAGE [RESULTS]
#   STAGE: check1  - the executor's logits on one GPU, eager and CUDA graphs, against each other
#          check2  - the same at TP2 with NCCL and with one-shot all-reduce, in graphs (2 GPUs)
#          smoke   - one short run of each hypothesis into RESULTS/smoke (2 GPUs)
#          one_gpu - gpu_cuda_graphs and gpu_aa (on GPUs 0 and 1 side by side where 2 are visible)
#          two_gpu - gpu_symm_mem_tp2 (2 GPUs)
#          resume  - resume NAME FROM: finish an interrupted run of NAME from RESULTS/runs/FROM
#          tp2_dry - the issue-14 hypothesis at TP2, a dry run into RESULTS/tp2_dry_run (2 GPUs)
#          tp8     - gpu_eagle_allreduce_tp8 (8 GPUs); tp4: gpu_eagle_allreduce_tp4 (4 GPUs)
#          machineA, machineB - issue 26: gpu_cuda_graphs and gpu_aa over two machines used one after the
#                    other (design.machines: 2), merged by resume into one record each, plus the decode
#                    benchmark. machineA: the device check, step and HTTP stages (cold compile), then slot 1 of
#                    gpu_cuda_graphs and slot 0 of gpu_aa into run directories whose partial verdicts go to a
#                    scratch ledger and are deleted. machineB (RESULTS holding machineA's run directories):
#                    the other slots with resume= into the same directories, their verdicts into RESULTS's
#                    ledger (allow_amend: the design now says machines: 2), then decode_step.py all.
#          bench   - decode_step.py all (check, step, http without the no-overlap run, hf at batch 1) in one
#                    run into RESULTS/decode/COMMIT_bench (STAGE_S="check step http hf" seconds each)
#          decode  - benchmarks/gpu/decode_step.py: device check of the fused path, the step against the
#                    roofline, over HTTP, HF's torch.compile (1 GPU); STAGES="check step" picks some
#
# Records name the code that ran only when the tree has its .git: send a git bundle and run from a clone
# (git clone -q BUNDLE /tmp/code && cd /tmp/code && bash benchmarks/gpu/run_device.sh ...); a copied tree
# without .git records "no git work tree" instead of a commit.
set -uo pipefail
WHEELS=${1:?wheel directory}
STAGE=${2:?stage}
RESULTS=${3:-docs/results/gpu}
# NVLink multicast stays off, always (shared hosts): NCCL, torch symmetric memory and NVSHMEM.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$WHEELS"/*.whl \
  || { echo "wheel install failed"; exit 1; }
export PYTHONPATH=$PWD:/tmp/site
mkdir -p "$RESULTS/env"

describe() {  # the machine as this stage found it
  local tag=$1
  {
    echo "# $tag: $(date -u +%FT%TZ)"
    nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.mem,clocks.max.sm,clocks.max.mem,power.limit,temperature.gpu,persistence_mode --format=csv
    nvidia-smi -L
    nvidia-smi topo -m 2>&1 | head -12
    python3 -c 'import torch, platform; print("python", platform.python_version(), "torch", torch.__version__, "cuda", torch.version.cuda, "nccl", ".".join(map(str, torch.cuda.nccl.version())), "gpus", torch.cuda.device_count())'
    env | grep -E '^(NCCL_NVLS_ENABLE|TORCH_SYMM_MEM_DISABLE_MULTICAST|NVSHMEM_DISABLE_NVLS|CUDA_VISIBLE_DEVICES)='
  } > "$RESULTS/env/$tag.txt" 2>&1
  cat "$RESULTS/env/$tag.txt"
}

run() {  # one hypothesis through the framework's normal path, its run directory named after it
  local name=$1 dir=$2; shift 2
  python3 -m framework run hypothesis="$name" backend=gpu ledger="$RESULTS/${LEDGER:-verdicts.jsonl}" \
    hydra.run.dir="$RESULTS/$dir" progress=false backend.ready_timeout_s="${READY_TIMEOUT:-400}" "$@"
}

one_check() {  # one executor logits check, killed (stacks printed) if it hangs
  local name=$1; shift
  timeout -s KILL "${CHECK_TIMEOUT:-150}" python3 -m framework.servers.gpu.check --model-path llama-1b --device cuda --verbose 120 \
    --out /tmp/checks/$name.pt "$@"
}

compare() {  # every check's logits against TP1 eager
  python3 - /tmp/checks <<'PY' | tee -a "$RESULTS/env/logits_check.txt"
import sys, pathlib, torch
d = pathlib.Path(sys.argv[1]); ref = torch.load(d / "tp1.pt")
for f in sorted(d.glob("*.pt")):
    x = torch.load(f)
    rel = ((x["logits"] - ref["logits"]).norm() / ref["logits"].norm()).item()
    print(f"{f.stem:6s} impl={x['impl']:18s} rel_err_vs_tp1_eager={rel:.2e} same_steps={x['steps'] == ref['steps']}")
PY
}

case "$STAGE" in
  check1)  # one GPU: eager and graphs
    mkdir -p /tmp/checks
    one_check tp1 && one_check tp1g --graphs && compare
    ;;
  check2)  # two GPUs: NCCL and one-shot, both in graphs
    mkdir -p /tmp/checks
    one_check tp2n --tp-size 2 --graphs && one_check tp2s --tp-size 2 --graphs --symm-mem; compare
    ;;
  smoke)
    describe smoke
    RESULTS=$RESULTS/smoke
    mkdir -p "$RESULTS"
    CUDA_VISIBLE_DEVICES=0 run gpu_aa runs/gpu_aa design.launches=1 design.requests=4 &
    CUDA_VISIBLE_DEVICES=1 run gpu_cuda_graphs runs/gpu_cuda_graphs design.launches=1 design.requests=16 design.warmup=2 &
    wait
    run gpu_symm_mem_tp2 runs/gpu_symm_mem_tp2 design.launches=1 design.requests=16 design.warmup=2
    ;;
  one_gpu)  # side by side on two GPUs where there are two, else one after the other
    describe one_gpu
    if [ "$(nvidia-smi -L | wc -l)" -ge 2 ]; then
      CUDA_VISIBLE_DEVICES=0 run gpu_cuda_graphs runs/gpu_cuda_graphs > "$RESULTS/env/one_gpu_graphs.out" 2>&1 &
      CUDA_VISIBLE_DEVICES=1 run gpu_aa runs/gpu_aa > "$RESULTS/env/one_gpu_aa.out" 2>&1 &
      wait
    else
      run gpu_cuda_graphs runs/gpu_cuda_graphs > "$RESULTS/env/one_gpu_graphs.out" 2>&1
      run gpu_aa runs/gpu_aa > "$RESULTS/env/one_gpu_aa.out" 2>&1
    fi
    tail -n 25 "$RESULTS/env/one_gpu_graphs.out" "$RESULTS/env/one_gpu_aa.out"
    ;;
  two_gpu)
    describe two_gpu
    run gpu_symm_mem_tp2 runs/gpu_symm_mem_tp2
    ;;
  resume)  # finish an interrupted run: resume NAME FROM_DIR (under RESULTS/runs)
    describe "resume_$4"
    run "$4" "runs/$4" resume="$RESULTS/runs/$5"
    ;;
  tp2_dry)
    describe tp2_dry
    LEDGER=verdicts.jsonl RESULTS=$RESULTS/tp2_dry_run run gpu_eagle_allreduce_tp2 runs/gpu_eagle_allreduce_tp2 "${@:4}"
    ;;
  tp4|tp8)
    describe "$STAGE"
    run "gpu_eagle_allreduce_$STAGE" "runs/gpu_eagle_allreduce_$STAGE"
    ;;
  machineA|machineB)
    export TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-/tmp/inductor} TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-/tmp/inductor/triton}
    describe "$STAGE"
    DEC=$RESULTS/decode/$(git rev-parse --short HEAD)_$STAGE
    mkdir -p "$DEC"
    git log --oneline -1 | tee "$DEC/commit.txt"
    cp "$RESULTS/env/$STAGE.txt" "$DEC/decode.txt"
    if [ "$STAGE" = machineA ]; then
      python3 benchmarks/gpu/decode_step.py all --out "$DEC" --stages check step http --quick \
        --stage-timeouts "${CHECK_S:-260}" "${STEP_S:-150}" "${HTTP_S:-120}" 0 | tee "$DEC/all.txt"
      python3 -c "import json,sys; sys.exit(0 if json.load(open('$DEC/check.json'))['ok'] else 1)" \
        || { echo "device check failed: no records"; exit 1; }
      LEDGER=/tmp/scratch_verdicts.jsonl  # partial verdicts of one machine: not kept
      python3 -m framework run hypothesis=gpu_cuda_graphs backend=gpu ledger="$LEDGER" progress=false \
        hydra.run.dir="$RESULTS/runs/gpu_cuda_graphs_2m" backend.ready_timeout_s="${READY_TIMEOUT:-400}" \
        machine.slot=1 > "$RESULTS/env/machineA_graphs.out" 2>&1; echo "gpu_cuda_graphs slot 1 rc=$?"
      python3 -m framework run hypothesis=gpu_aa backend=gpu ledger="$LEDGER" progress=false \
        hydra.run.dir="$RESULTS/runs/gpu_aa_2m" backend.ready_timeout_s="${READY_TIMEOUT:-400}" \
        machine.slot=0 > "$RESULTS/env/machineA_aa.out" 2>&1; echo "gpu_aa slot 0 rc=$?"
      for d in gpu_cuda_graphs_2m gpu_aa_2m; do  # only the trials stay: the record is made on machine B
        rm -rf "$RESULTS/runs/$d/verdict.json" "$RESULTS/runs/$d/summary.md" "$RESULTS/runs/$d/report"*
      done
    else
      for spec in "gpu_cuda_graphs 0" "gpu_aa 1"; do
        set -- $spec
        run "$1" "runs/$1_2m" machine.slot="$2" resume="$RESULTS/runs/$1_2m" allow_amend=true \
          > "$RESULTS/env/machineB_$1.out" 2>&1; echo "$1 slot $2 rc=$?"; tail -n 22 "$RESULTS/env/machineB_$1.out"
      done
      python3 benchmarks/gpu/decode_step.py all --out "$DEC" --stages step http hf --hf-batches ${HF_BATCHES:-1} \
        --stage-timeouts 0 "${STEP_S:-150}" "${HTTP_S:-120}" "${HF_S:-150}" | tee "$DEC/all.txt"
    fi
    ;;
  bench)
    export TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-/tmp/inductor} TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-/tmp/inductor/triton}
    describe bench
    DEC=$RESULTS/decode/$(git rev-parse --short HEAD)_bench
    mkdir -p "$DEC"
    git log --oneline -1 | tee "$DEC/commit.txt"
    cp "$RESULTS/env/bench.txt" "$DEC/decode.txt"
    python3 benchmarks/gpu/decode_step.py all --out "$DEC" --quick --hf-batches ${HF_BATCHES:-1} \
      --stage-timeouts ${STAGE_S:-90 120 80 140} | tee "$DEC/all.txt"
    ;;
  decode)
    describe decode
    git log --oneline -1 2>&1 | tee "$RESULTS/env/decode_commit.txt"
    for st in ${STAGES:-check step http hf}; do
      timeout -s KILL "${STAGE_TIMEOUT:-240}" python3 benchmarks/gpu/decode_step.py "$st" --out "$RESULTS" \
        > "$RESULTS/$st.log" 2>&1; echo "stage $st rc=$?"; tail -n 30 "$RESULTS/$st.log"
    done
    ;;
  *) echo "unknown stage $STAGE"; exit 2 ;;
esac
