#!/usr/bin/env python3
"""What PyTorch's own `F.linear` (cuBLAS / cuBLASLt) takes on the linears our kernels replace.

An anchor for `self-test --device cuda` of `ddtree-bench`: the same Qwen3-8B weight shapes and row
counts (1 = AR step, 16 = draft block, 65 = verify B = 64, 129 = verify B = 128), the same method —
bf16, back to back over enough random weight copies that the L2 never holds the next one, warmed
up, the median of five timings of 4 × copies launches — so the two report the same µs per launch.
Also prints the kernel that cuBLAS picked for each shape (its name gives the tile shape, split-k
and whether it uses the Hopper warpgroup MMAs), one JSON line per shape:

    python3 tools/bench_torch_linear.py [--rows 1,16,65,129]
"""
import argparse
import json
import statistics

import torch
import torch.nn.functional as F

# name, output features, input features: Qwen3-8B's projections (gate/up fused) and LM head.
SHAPES = [
    ("qkv", 6144, 4096),
    ("o_proj", 4096, 4096),
    ("gate_up", 24576, 4096),
    ("down", 4096, 12288),
    ("lm_head", 151936, 4096),
]
REFERENCE_BYTES_PER_S = 4.3e12  # the H200 figure the goals are stated against


def weight_copies(n, k):
    copies = max(1, min(12, 1_500_000_000 // (n * k * 2)))
    return [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02 for _ in range(copies)]


def seconds_per_launch(x, weights):
    for w in weights:
        F.linear(x, w)
    torch.cuda.synchronize()
    launches = 4 * len(weights)
    times = []
    for _ in range(5):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        for i in range(launches):
            F.linear(x, weights[i % len(weights)])
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1e3 / launches)
    return statistics.median(times)


def kernels_of(x, w):
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        F.linear(x, w)
        torch.cuda.synchronize()
    return sorted({e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA})


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="1,16,65,129")
    args = parser.parse_args()
    device = torch.cuda.get_device_name()
    for name, n, k in SHAPES:
        weights = weight_copies(n, k)
        for rows in (int(r) for r in args.rows.split(",")):
            x = torch.randn(rows, k, device="cuda", dtype=torch.bfloat16)
            s = seconds_per_launch(x, weights)
            line = {
                "device": device,
                "layer": f"qwen3-8b.{name}",
                "rows": rows,
                "us": round(s * 1e6, 2),
                "of_4300": round(n * k * 2 / s / REFERENCE_BYTES_PER_S, 3),
                "kernels": kernels_of(x, weights[0]),
            }
            print(json.dumps(line), flush=True)
        del weights
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
