#!/usr/bin/env bash
# The client on a quiet machine (issue 32): the lent H200 host's spare CPUs, not its GPU.
#
#   bash benchmarks/gpu/client_quiet.sh RESULTS_DIR
#
# Run from the root of a git clone of the tree (records name its commit). Everything runs pinned to
# CORES (default 10-15: cores 0-9 are busy with a GPU job at the same time), the known-schedule server on
# SERVER_CORE (10), each client on CLIENT_CORE (11), and writes under RESULTS_DIR:
#   client_capacity.md / .log  - benchmarks/client_capacity.py: the framework's client at 1/16/64/128
#                                streams (closed loop) and 60/120/240/480 req/s (open loop) on one client core,
#                                3 repetitions; `vllm bench serve` and AIPerf are optional columns, measured
#                                only where they are found (their notes say what was found)
#   selfcheck.md / .log        - benchmarks/selfcheck_calibration.py over docs/results/selfcheck.md's grid
#                                (workers 1 2 4 x 16/64/128/256 streams, 60/120/240 req/s, 0 and 1 burners)
#   env.txt                    - the machine, its load before and after, the commit
# The self-check's criterion and its 1% / 0.5% lines are not touched: this run only measures them.
# Expected: about 130 s for client_capacity and 120 s for the calibration on a quiet host; each step is
# bounded (CAPACITY_S=170, SELFCHECK_S=170), so at most 345 s in all. A step cut by its bound keeps the rows
# it printed in its .log (client_capacity.md is rewritten after each row). CLIENTS: client_capacity's clients
# (default "framework vllm aiperf"; where vLLM or AIPerf is installed they take minutes more). QUICK=1: tiny sizes (a dry run on any 2-core machine, with CORES=0-1 SERVER_CORE=0
# CLIENT_CORE=1), about 40 s. SKIP_CAPACITY=1: the self-check step alone (SELFCHECK_S=420 lets all 30 runs finish).
set -uo pipefail
RESULTS=${1:?results directory}
CORES=${CORES:-10-15}
SERVER_CORE=${SERVER_CORE:-10}
CLIENT_CORE=${CLIENT_CORE:-11}
CAPACITY_S=${CAPACITY_S:-170}
SELFCHECK_S=${SELFCHECK_S:-170}
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
mkdir -p "$RESULTS"
PY=${PYTHON:-python3}

if [ "${QUICK:-0}" = 1 ]; then
  CAPACITY=(--streams 1 16 --rates 60 240 --repeat 1 --open-s 1 --min-requests 16)
  SELFCHECK=(--workers 1 2 --streams 16 --rates 120 --burners 0 1 --open-s 1 --min-requests 16)
else
  CAPACITY=(--streams 1 16 64 128 --rates 60 120 240 480 --repeat 3)
  SELFCHECK=(--workers 1 2 4 --streams 16 64 128 256 --rates 60 120 240 --burners 0 1)
fi

{
  echo "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
  echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo 'no git work tree')"
  echo "cpus: $(nproc --all) online, model: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
  echo "pinned: cores $CORES (server $SERVER_CORE, clients $CLIENT_CORE)"
  echo "python: $($PY --version 2>&1)"
  echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "vllm: $($PY -c 'import vllm; print(vllm.__version__)' 2>/dev/null || echo 'not importable here (client_capacity looks for its venv itself)')"
  echo "aiperf: $(command -v aiperf || echo 'not on PATH')"
} > "$RESULTS/env.txt"
cat "$RESULTS/env.txt"

step() {  # name, bound (s), command...
  local name=$1 bound=$2; shift 2
  local t0=$SECONDS
  timeout --kill-after=10 "$bound" taskset -c "$CORES" "$@" > "$RESULTS/$name.log" 2>&1
  local rc=$?
  echo "$name: exit $rc after $((SECONDS - t0)) s$([ $rc = 124 ] && echo " (cut at its $bound s bound)")" \
    | tee -a "$RESULTS/env.txt"
  tail -n 25 "$RESULTS/$name.log"
}

[ "${SKIP_CAPACITY:-0}" = 1 ] || step client_capacity "$CAPACITY_S" "$PY" benchmarks/client_capacity.py --clients ${CLIENTS:-framework vllm aiperf} \
  "${CAPACITY[@]}" --server-core "$SERVER_CORE" --client-core "$CLIENT_CORE" --md "$RESULTS/client_capacity.md"
step selfcheck "$SELFCHECK_S" "$PY" benchmarks/selfcheck_calibration.py "${SELFCHECK[@]}" \
  --server-core "$SERVER_CORE" --client-core "$CLIENT_CORE" --md "$RESULTS/selfcheck.md" --dump "$RESULTS/selfcheck_dump"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$RESULTS/env.txt"
ls -l "$RESULTS"
