#!/usr/bin/env bash
# The recipe that made tests/fixtures/sglang_0_5_9/: SGLang 0.5.9's own server, run once on a CPU-only
# machine, and what it answered. Never run in CI (about 20 minutes and 6 GB; it needs PyPI).
#
# SGLang's CPU kernels (sgl-kernel built with its CPU build file) are not on PyPI: PyPI has only the
# CUDA build of sgl-kernel 0.3.21, whose compiled ops need libcuda. So this makes a STAND-IN for the
# kernel package from that wheel's Python files alone (standin.py: no compiled file is copied, the ops
# load is wrapped in try/except, the CUDA preload is off). With it SGLang's Python server runs with
# torch-native attention: its HTTP layer, argument parsing, scheduler, readiness and teardown are
# SGLang's own; its kernels and its speed are not. The stand-in lives only in the recording venv.
#
# usage: tools/sglang_fixtures/record.sh [VENV] [OUT]
#   VENV default: ${TMPDIR:-/tmp}/sglang-venv; OUT default: tests/fixtures/sglang_0_5_9
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
VENV="${1:-${TMPDIR:-/tmp}/sglang-venv}"
OUT="${2:-$HERE/../../tests/fixtures/sglang_0_5_9}"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$OUT"
t0=$(date +%s)
PY="$VENV/bin/python"
PIP=("$VENV/bin/pip" install -q)

# 1. SGLang without its CUDA stack: the CPU torch, a trimmed dependency list, the wheel with --no-deps
[ -x "$PY" ] || python3 -m venv "$VENV"
"${PIP[@]}" torch==2.13.0
"${PIP[@]}" -r "$HERE/requirements-trimmed.txt"
"${PIP[@]}" --no-deps sglang==0.5.9
pip download -q --no-deps -d "$WORK" sgl-kernel==0.3.21 torchvision==0.28.0
"$PY" "$HERE/standin.py" "$WORK"/sgl_kernel-0.3.21-*.whl "$VENV"
echo "installed in $(( $(date +%s) - t0 )) s"

# 2. a tiny random-weight model with a locally trained tokenizer (no download)
"$PY" "$HERE/tiny_model.py" "$WORK/tiny"

# 3. start-up failures, from SGLang's own start: a missing module (no torchvision yet), then the PyPI
#    torchvision built for torch 2.13's CUDA build beside the CPU torch (`operator torchvision::nms does not exist`)
"$PY" "$HERE/record.py" failure missing_module "$OUT" "$WORK/tiny"
"${PIP[@]}" --no-deps "$WORK"/torchvision-0.28.0-*.whl
"$PY" "$HERE/record.py" failure extension_mismatch "$OUT" "$WORK/tiny"

# 4. a torch and torchvision that load together (PyPI's 2.14.1 builds with their CUDA libraries, which
#    load without a GPU), then a bad flag and the real serving run
"${PIP[@]}" torch==2.14.1 torchvision==0.29.1
"$PY" "$HERE/record.py" failure bad_flag "$OUT" "$WORK/tiny" --device cpu --no-such-flag 1
"$PY" "$HERE/record.py" serve "$OUT" "$WORK/tiny"
"$PY" "$HERE/record.py" crash "$OUT" "$WORK/tiny"   # a token id beyond the vocabulary
"$PY" -c "import importlib.metadata as m; print('sglang', m.version('sglang'), 'torch', m.version('torch'))" \
    > "$OUT/VERSIONS"
echo "recorded in $OUT in $(( $(date +%s) - t0 )) s"
