#!/usr/bin/env python3
"""Launches per device sync in cubecl's profiler log.

cubecl's profiler (a `cubecl.toml` in the working directory with `[profiling.logger]
level = "basic"` and a `file`) writes one line per kernel launch and closes a table at every
device sync; `ddtree-bench stages` syncs between stages, so each table is one stage's launches
(with `--reps 1 --warmup 0`, one step's). Prints each table's launch count and its kernels by
count:

    python3 tools/profile_blocks.py kernels.log [kernels shown per table]
"""
import collections
import re
import sys

LAUNCH = re.compile(r"^[0-9.]+(ns|µs|ms|s)$")


def tables(path):
    current = []
    for line in open(path, encoding="utf-8"):
        if line.startswith("|⎯"):
            if current:
                yield current
            current = []
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 2 and LAUNCH.match(cells[0]):
            current.append(cells[1])
    if current:
        yield current


def main():
    shown = int(sys.argv[2]) if len(sys.argv) > 2 else 8
    for i, launches in enumerate(tables(sys.argv[1])):
        counts = collections.Counter(launches).most_common(shown)
        print(i, len(launches), ", ".join(f"{name}×{n}" for name, n in counts))


if __name__ == "__main__":
    main()
