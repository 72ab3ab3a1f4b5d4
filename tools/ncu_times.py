#!/usr/bin/env python3
"""GPU time per kernel launch shape from Nsight Compute CSVs (`gpu_suite.sh` parts `ncu` and
`ncu-kernel-times`): launches, total and median µs per (kernel, grid, block). Given two CSVs
(the same run of two builds, e.g. `old/` and `logs/` of one `.gpu/call.sh` call), the shapes side
by side with the change of their totals.

    python3 tools/ncu_times.py old/ncu-kernel-times.csv.gz logs/ncu-kernel-times.csv.gz
"""

import csv
import gzip
import statistics
import sys
from collections import defaultdict


def launches(path):
    """{(kernel, grid, block): [µs per launch]} of the `gpu__time_duration.sum` rows."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", newline="") as f:
        # The profiled program's own output comes first; the CSV starts at its header.
        lines = f.readlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID",')), None)
    if start is None:
        sys.exit(f"{path}: no Nsight Compute CSV header")
    times = defaultdict(list)
    for row in csv.DictReader(lines[start:]):
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        ns = float(row["Metric Value"].replace(",", ""))
        times[(row["Kernel Name"], row["Grid Size"], row["Block Size"])].append(ns / 1000)
    return times


def summary(times):
    return (len(times), sum(times), statistics.median(times))


def main(paths):
    if not 1 <= len(paths) <= 2:
        sys.exit(__doc__)
    runs = [launches(p) for p in paths]
    shapes = sorted(set().union(*runs), key=lambda s: -sum(runs[-1].get(s, runs[0].get(s, []))))
    header = f"{'kernel':<40} {'grid':<14} {'block':<12}"
    for p in paths:
        header += f" | {'n':>4} {'total µs':>10} {'median':>8}"
    print(header + (f" | {'Δ total µs':>10}" if len(runs) == 2 else ""))
    totals = [0.0] * len(runs)
    for shape in shapes:
        line = f"{shape[0][:40]:<40} {shape[1]:<14} {shape[2]:<12}"
        sums = []
        for i, run in enumerate(runs):
            if shape in run:
                n, total, median = summary(run[shape])
                line += f" | {n:>4} {total:>10.1f} {median:>8.2f}"
                totals[i] += total
                sums.append(total)
            else:
                line += f" | {'—':>4} {'':>10} {'':>8}"
                sums.append(0.0)
        if len(runs) == 2:
            line += f" | {sums[1] - sums[0]:>+10.1f}"
        print(line)
    print("total µs: " + " → ".join(f"{t:.1f}" for t in totals))


if __name__ == "__main__":
    main(sys.argv[1:])
