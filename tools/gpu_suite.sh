#!/usr/bin/env bash
# The GPU suite, run on the H200 machine from binaries built on the development machine:
#
#   CUDARC_CUDA_VERSION=13000 cargo build --release -p ddtree-bench -p ddtree-server \
#       --features ddtree-bench/cuda,ddtree-server/cuda
#   mkdir -p .gpu && cp target/release/ddtree-{bench,server} .gpu/   # .gpu/ is ignored by git
#   # on the GPU machine, from the repository root (the parts to run):
#   bash tools/gpu_suite.sh .gpu "$OUT" selftest lossless stages stages-27b eval server torch profile
#
# Every part writes its full output to $2/<part>.log; the summary is printed at the end.
set -uo pipefail
dir="$1"
bin="$dir/ddtree-bench"
out="$2"
shift 2
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv | tee "$out/machine.log"
status=0
# A short stages run (one AR step, one B = 64 verify, one draft) for the profiler parts, and the
# tensor-core linear launches of its second verify layer (the first 16 are the drafter's prefill).
short=(stages --device cuda --reps 1 --warmup 0 --budgets 64)
verify_mma=(-k regex:linear_mma --launch-skip 20 --launch-count 4)
# The attention of an AR step's tenth layer (after the target's 36 prefill launches and the
# drafter's 5), and of the B = 64 verify's tenth layer (after the AR step's 36 and the 220 of its
# host-cost probe).
ar_attention=(-k regex:attention_mma --launch-skip 50 --launch-count 1)
verify_attention=(-k regex:attention_mma --launch-skip 307 --launch-count 1)
# An instruction mix: local and shared loads, asynchronous copies, all instructions, the
# tensor pipe's activity, shared-memory wavefronts and bank conflicts.
mix=smsp__sass_inst_executed_op_local_ld.sum,smsp__sass_inst_executed_op_local_st.sum,smsp__sass_inst_executed_op_shared_ld.sum,smsp__sass_inst_executed_op_ldgsts.sum,smsp__inst_executed.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum
# Nsight Compute on the picked launches (`-k … --launch-skip … --launch-count …`) of the short
# stages run: compute, memory, occupancy, issue and stall sections into <name>.log, then every
# stall reason and the instruction mix into <name>-stalls.log.
where_time_goes() {
  local name="$1"
  shift
  run "$name" bash -c "ncu --clock-control none --section SpeedOfLight --section ComputeWorkloadAnalysis \
    --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats --section WarpStateStats \
    --section SchedulerStats $* '$bin' ${short[*]}"
  run "$name-stalls" bash -c "ncu --clock-control none --csv \
    --metrics 'regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio',$mix $* '$bin' ${short[*]}"
}
# The GPU time of every launch of the kernels matching regex $2, in a short stages run with a
# B = 16 and a B = 64 verify, into $out/$1.csv.gz (`tools/ncu_times.py` sums it per launch shape).
kernel_times() {
  run "$1" bash -c "ncu --clock-control none --csv --print-units base --metrics gpu__time_duration.sum \
    -k 'regex:$2' '$bin' stages --device cuda --reps 1 --warmup 0 --budgets 16,64 \
    > '$out/$1.csv' && gzip -f '$out/$1.csv'"
}
run() {
  local name="$1"
  shift
  echo "== $name: $*"
  local start=$SECONDS
  if ! timeout "${limit:-240}" "$@" >"$out/$name.log" 2>&1; then
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
  lossless | lossless-qwen3 | lossless-qwen35)
    # `lossless` runs both fixture pairs (the Qwen3.5 one takes about two minutes).
    if [ "$part" != lossless-qwen35 ]; then
      run lossless-qwen3 "$bin" eval --device cuda --target fixtures/qwen3-tiny-tied --draft fixtures/dflash-tiny \
        --random-prompts 8 --max-new-tokens 48 --budgets 4,16,64
    fi
    if [ "$part" != lossless-qwen3 ]; then
      run lossless-qwen35 "$bin" eval --device cuda --target fixtures/qwen35-tiny --draft fixtures/dflash-qwen35-tiny \
        --random-prompts 8 --max-new-tokens 48 --budgets 4,16,64
    fi
    ;;
  stages) run stages "$bin" stages --device cuda ;;
  # The Qwen3.6-27B hybrid's stages (random bf16 weights, ≈ 58 GB with its drafter), B = 16 and 64.
  stages-27b) limit=420 run stages-27b "$bin" stages --device cuda --preset qwen3.6-27b --budgets 16,64 ;;
  # Every launch shape of the tensor-core linear at the verify/drafter row counts, checked and timed.
  sweep) limit=480 run sweep "$bin" self-test --device cuda --no-bandwidth --sweep-tiles ;;
  # The same at 65 rows only (a B = 64 verify): about five minutes.
  sweep-65) limit=480 run sweep-65 "$bin" self-test --device cuda --no-bandwidth --sweep-tiles 65 ;;
  # The attention of an AR step, a drafter block and a B = 64 verify at 1–33 key slices.
  sweep-attention) run sweep-attention "$bin" self-test --device cuda --no-bandwidth --sweep-attention ;;
  ncu)
    # Nsight Compute (needs a runtime that exposes the counters; `--clock-control none` leaves
    # the clocks alone): the GPU time and DRAM bytes of every kernel of a short stages run (one
    # pass per kernel, launches serialised: compare kernels, not the stage totals).
    # `ncu-sections`: the throughput, occupancy and stall sections of a few launches of the main
    # kernels: the tensor-core linear and the attention in a verify at B=64 (after the
    # prefill's), the GEMV in an AR step.
    limit=330 run ncu-times bash -c "ncu --clock-control none --csv --print-units base \
      --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum \
      '$bin' ${short[*]} > '$out/ncu-times.csv' && gzip -f '$out/ncu-times.csv'"
    ;;
  # The drafter's top-K launches (both stages).
  ncu-top-k) kernel_times ncu-top-k top_k ;;
  # Every launch of the kernels named by $kernels (by default the attention, its split combine
  # and the top-K): run once per build in one call, it sets two builds' kernels side by side
  # without the host's pace in the numbers.
  ncu-kernel-times) kernel_times ncu-kernel-times "${kernels:-attention|top_k}" ;;
  ncu-linear)
    # The GPU time of each tensor-core linear launch (Nsight Compute, serialised) of a self-test,
    # to set beside the self-test's wall time per back-to-back launch (its `bandwidth` lines):
    # the difference is what a launch costs outside its own execution.
    run ncu-linear bash -c "ncu --clock-control none --csv --print-units base \
      --metrics gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,launch__grid_size \
      -k regex:linear_mma --launch-count 600 '$bin' self-test --device cuda > '$out/ncu-linear.csv' \
      && gzip -f '$out/ncu-linear.csv'"
    ;;
  ncu-sections)
    sections=(--clock-control none --section SpeedOfLight --section MemoryWorkloadAnalysis
      --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats)
    run ncu-sections bash -c "ncu ${sections[*]} -k regex:linear_rows --launch-skip 40 --launch-count 4 '$bin' ${short[*]} \
      && ncu ${sections[*]} ${verify_mma[*]} '$bin' ${short[*]} \
      && ncu ${sections[*]} ${ar_attention[*]} '$bin' ${short[*]}"
    ;;
  ncu-attention)
    # Where the attention's time goes, in an AR step and in a B = 64 verify (one layer each).
    where_time_goes ncu-ar_attention "${ar_attention[@]}"
    where_time_goes ncu-verify_attention "${verify_attention[@]}"
    ;;
  ncu-mma)
    # Where the 65-row tensor-core linear's time goes, in one verify layer's four launches (QKV,
    # o_proj, gate/up, down) at B = 64.
    where_time_goes ncu-mma "${verify_mma[@]}"
    ;;
  kernel-source)
    # The CUDA source cubecl generates for every kernel of a short stages run (its compilation
    # log, gzipped); `tools/kernel_sass.py` compiles chosen kernels to SASS as cubecl does, on any
    # machine with NVRTC, ptxas and cuobjdump (no GPU needed). The log also turns on cubecl's
    # profiler, so this run's timings are not the benchmark's.
    run kernel-source env CUBECL_DEBUG_LOG="$out/cubecl.log" "$bin" "${short[@]}"
    gzip -f "$out/cubecl.log"
    ;;
  # The same with burn's matmul for more than 8 rows: the baseline of the tensor-core linear.
  stages-matmul) run stages-matmul "$bin" stages --device cuda --tensor-cores false ;;
  profile)
    # Launch counts and GPU time per kernel for each stage: cubecl's profiler (configured by a
    # cubecl.toml in the working directory) prints a table at every device sync, and the stages
    # command syncs between stages. Timings of this run are not valid (the profiler syncs).
    prof="$(mktemp -d)"
    printf '[profiling.logger]\nlevel = "basic"\nfile = "%s"\n' "$out/profile-kernels.log" >"$prof/cubecl.toml"
    run profile bash -c "cd '$prof' && '$(realpath "$bin")' stages --device cuda --reps 10 --warmup 2 --budgets 64"
    ;;
  server)
    # The server on the GPU with its default model, one greedy chat request for code.
    "$dir/ddtree-server" --device cuda --port 30123 --target models/demo/target --draft models/demo/draft >"$out/server.log" 2>&1 &
    pid=$!
    for _ in $(seq 120); do curl -sf localhost:30123/health >/dev/null && break; sleep 1; done
    run server-chat curl -sS localhost:30123/v1/chat/completions -H 'Content-Type: application/json' \
      -d '{"messages":[{"role":"user","content":"Write a Python function that reverses a string"}],"max_tokens":64,"temperature":0}'
    kill $pid
    ;;
  torch) run torch env PYTHONUNBUFFERED=1 python3 tools/bench_transformers.py --topk 64 --compiled ;;
  *) echo "unknown part $part"; status=1 ;;
  esac
done
exit $status
