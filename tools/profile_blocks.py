#!/usr/bin/env python3
"""Launches per device sync in cubecl's profiler log.

cubecl's profiler (a `cubecl.toml` in the working directory with `[profiling.logger]
level = "basic"` and a `file`) writes one line per kernel launch, with its time, and closes a
table at every device sync; `ddtree-bench stages` syncs between stages, so each table is one
stage's launches (with `--reps 1 --warmup 0`, one step's). Prints each table's launch count and
its kernels by count; with `--times T,…`, the kernel time of tables T by kernel (the profiler
synchronises around every launch, so each time is the launch's own):

    python3 tools/profile_blocks.py kernels.log [kernels shown per table]
    python3 tools/profile_blocks.py kernels.log --times 2,16
"""
import collections
import re
import sys

LAUNCH = re.compile(r"^([0-9.]+)(ns|µs|ms|s)$")
MICROSECONDS = {"ns": 1e-3, "µs": 1.0, "ms": 1e3, "s": 1e6}


def tables(path):
    """Each table's launches as (kernel, µs)."""
    current = []
    for line in open(path, encoding="utf-8"):
        if line.startswith("|⎯"):
            if current:
                yield current
            current = []
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        time = LAUNCH.match(cells[0]) if len(cells) >= 2 else None
        if time:
            current.append((cells[1], float(time.group(1)) * MICROSECONDS[time.group(2)]))
    if current:
        yield current


def counts(path, shown):
    for i, launches in enumerate(tables(path)):
        top = collections.Counter(name for name, _ in launches).most_common(shown)
        print(i, len(launches), ", ".join(f"{name}×{n}" for name, n in top))


def times(path, wanted):
    for i, launches in enumerate(tables(path)):
        if i not in wanted:
            continue
        total = collections.defaultdict(float)
        n = collections.Counter()
        for name, us in launches:
            total[name] += us
            n[name] += 1
        print(f"table {i}: {len(launches)} launches, {sum(total.values()) / 1000:.2f} ms")
        for name, us in sorted(total.items(), key=lambda item: -item[1]):
            print(f"  {name:<28} ×{n[name]:<4} {us / 1000:9.3f} ms  {us / n[name]:9.1f} µs each")


def main():
    args = sys.argv[1:]
    if "--times" in args:
        at = args.index("--times")
        times(args[0], {int(t) for t in args[at + 1].split(",")})
    else:
        counts(args[0], int(args[1]) if len(args) > 1 else 8)


if __name__ == "__main__":
    main()
