#!/usr/bin/env bash
# The GPU suite, run on the H200 machine from binaries built on the development machine:
#
#   CUDARC_CUDA_VERSION=13000 cargo build --release -p ddtree-bench --features cuda
#   mkdir -p .gpu && cp target/release/ddtree-bench .gpu/     # .gpu/ is ignored by git
#   # on the GPU machine, from the repository root (stages: which parts to run):
#   bash tools/gpu_suite.sh .gpu "$OUT" selftest eval lossless stages torch
#
# Every part writes its full output to $2/<part>.log; the summary is printed at the end.
set -uo pipefail
bin="$1/ddtree-bench"
out="$2"
shift 2
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv | tee "$out/machine.log"
status=0
run() {
  local name="$1"
  shift
  echo "== $name: $*"
  local start=$SECONDS
  if ! timeout 240 "$@" >"$out/$name.log" 2>&1; then
    echo "!! $name failed (exit $?)"
    status=1
  fi
  echo "   $((SECONDS - start)) s"
  tail -n 25 "$out/$name.log"
}
for part in "$@"; do
  case "$part" in
  selftest) run selftest "$bin" self-test --device cuda ;;
  eval) run eval "$bin" eval --device cuda ;;
  lossless)
    run lossless-qwen3 "$bin" eval --device cuda --target fixtures/qwen3-tiny-tied --draft fixtures/dflash-tiny \
      --random-prompts 8 --max-new-tokens 48 --budgets 4,16,64
    run lossless-qwen35 "$bin" eval --device cuda --target fixtures/qwen35-tiny --draft fixtures/dflash-qwen35-tiny \
      --random-prompts 8 --max-new-tokens 48 --budgets 4,16,64
    ;;
  stages) run stages "$bin" stages --device cuda ;;
  torch) run torch env PYTHONUNBUFFERED=1 python3 tools/bench_transformers.py --topk 64 --compiled ;;
  *) echo "unknown part $part"; status=1 ;;
  esac
done
exit $status
