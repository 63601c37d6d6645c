#!/bin/bash
cd "$(git rev-parse --show-toplevel)"
export PYTHONPATH=$PWD
PY=${PY:-python}
R=docs/results/real_model/cpu
for pair in "smollm2_outputs llamacpp" "smollm2_speculation llamacpp_spec"; do
  set -- $pair
  echo "== $1 $2 start $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
  $PY -m framework register hypothesis=$1 backend=$2 ledger=$R/verdicts.jsonl
  $PY -m framework run hypothesis=$1 backend=$2 ledger=$R/verdicts.jsonl hydra.run.dir=$R/runs/$1 progress=false
  echo "== $1 rc=$? end $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
done
$PY -m framework audit ledger=$R/verdicts.jsonl; echo "audit rc=$?"
