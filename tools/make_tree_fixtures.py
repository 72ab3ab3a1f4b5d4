#!/usr/bin/env python3
"""Record the reference DDTree builder's trees and walks as fixtures for the `ddtree` crate.

    python tools/make_tree_fixtures.py REFERENCE_CHECKOUT [--out fixtures/trees/reference_trees.json]

REFERENCE_CHECKOUT is a checkout of https://github.com/liranringel/ddtree (a clone, or
`git archive HEAD | tar -x`); nothing of it is copied here. Its `ddtree.py` imports torch, numpy,
transformers, loguru and datasets, so they must be installed.

For each random case this script makes draft logits, calls the reference's `build_ddtree_tree`,
and stores the exact f32 top-K table the reference built its heap from (captured as the
reference converts it to numpy, so ties and rank order are the reference's own), plus the
reference's node tokens, depths and parents. It then draws random posteriors and stores the
reference's `follow_verified_tree` result for each. Log-probs are stored as f32 bit patterns so
that -inf and NaN survive JSON and the Rust test reads back identical bits.
"""

import argparse
import contextlib
import json
import random
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

BUDGETS = [1, 2, 4, 16, 64, 256]
# Logit families: several produce exact ties in log-probs, within a depth and across depths.
KINDS = [
    ("gaussian", 4),
    ("integer", 4),
    ("repeated_rows", 3),
    ("repeated_gaussian_row", 3),
    ("uniform", 2),
    ("bf16", 2),
    ("peaked", 2),
    ("masked", 2),
    ("nan_row", 1),
]
MAX_TABLE_ENTRIES = 900  # keeps the JSON well under 1 MB


def make_logits(kind, depths, vocab, rng, gen):
    if kind == "gaussian":
        return torch.randn(depths, vocab, generator=gen) * rng.uniform(0.5, 4.0)
    if kind == "integer":
        return torch.randint(-2, 3, (depths, vocab), generator=gen).float()
    if kind == "repeated_rows":
        row = torch.randint(-1, 2, (1, vocab), generator=gen).float()
        return row.repeat(depths, 1)
    if kind == "repeated_gaussian_row":
        # Paths that permute the same log-probs tie in exact arithmetic; only the rounding of
        # the reference's running sums orders them.
        # A wide spread (log-probs from about -1e-9 to -100) makes f64 sums round, so that
        # the exact evaluation order of the sums matters.
        scale = rng.choice([1.0, 8.0, 25.0])
        return (torch.randn(1, vocab, generator=gen) * scale).repeat(depths, 1)
    if kind == "uniform":
        return torch.zeros(depths, vocab)
    if kind == "bf16":
        return (torch.randn(depths, vocab, generator=gen) * 3.0).to(torch.bfloat16)
    if kind == "peaked":
        logits = torch.randn(depths, vocab, generator=gen)
        logits[torch.arange(depths), torch.randint(0, vocab, (depths,), generator=gen)] += 8.0
        return logits
    if kind == "masked":
        logits = torch.randn(depths, vocab, generator=gen)
        masked = torch.rand(depths, vocab, generator=gen) < 0.6
        masked[:, 0] = False  # keep one finite logit per depth
        return logits.masked_fill(masked, float("-inf"))
    if kind == "nan_row":
        logits = torch.randn(depths, vocab, generator=gen)
        logits[rng.randrange(depths), rng.randrange(vocab)] = float("nan")
        return logits
    raise ValueError(kind)


@contextlib.contextmanager
def capture_numpy_arrays(store):
    """Record every Tensor.numpy() result: the reference turns its top-K table into numpy."""
    original = torch.Tensor.numpy

    def recording_numpy(self, *args, **kwargs):
        array = original(self, *args, **kwargs)
        store.append(array.copy())
        return array

    torch.Tensor.numpy = recording_numpy
    try:
        yield
    finally:
        torch.Tensor.numpy = original


def f32_bits(array):
    return np.ascontiguousarray(array, dtype=np.float32).view(np.uint32).ravel().tolist()


def random_posterior(child_maps, vocab, rng):
    """Mostly follow a child (85 %), sometimes stop on a random token."""
    posterior = []
    for children in child_maps:
        if children and rng.random() < 0.85:
            posterior.append(rng.choice(sorted(children)))
        else:
            posterior.append(rng.randrange(vocab + 4))
    return posterior


def make_case(index, reference, rng, gen, budget=None):
    budget = BUDGETS[index % len(BUDGETS)] if budget is None else budget
    names, weights = zip(*KINDS)
    kind = rng.choices(names, weights)[0]
    depths = rng.randint(1, 15)
    if budget > 1 and rng.random() < 0.4:
        vocab = rng.randint(1, budget - 1)  # K = vocab < B
    else:
        vocab = rng.randint(max(budget, 1), max(budget, 1) + 24)
    k = min(budget, vocab)
    depths = max(1, min(depths, MAX_TABLE_ENTRIES // max(k, 1)))
    logits = make_logits(kind, depths, vocab, rng, gen)

    arrays = []
    with capture_numpy_arrays(arrays):
        node_tokens, node_depths, parents, child_maps, _, _ = reference.build_ddtree_tree(logits, budget)
    if budget > 0:
        log_probs, token_ids = arrays[0], arrays[1]
        assert log_probs.dtype == np.float32 and log_probs.shape == (depths, k), log_probs.shape
        assert token_ids.shape == (depths, k), token_ids.shape
    else:
        log_probs, token_ids = np.zeros((depths, 0), np.float32), np.zeros((depths, 0), np.int64)
        k = 0

    walks = []
    for _ in range(2):
        posterior = random_posterior(child_maps, vocab, rng)
        accepted, bonus = reference.follow_verified_tree(child_maps, torch.tensor([posterior]))
        walks.append({"posterior": posterior, "accepted": [int(i) for i in accepted], "bonus": int(bonus)})

    return {
        "name": f"case-{index:03d}-{kind}-b{budget}-d{depths}-k{k}",
        "budget": budget,
        "depths": depths,
        "k": k,
        "root": rng.randrange(vocab),
        "tokens": token_ids.ravel().tolist(),
        "log_prob_bits": f32_bits(log_probs),
        "expected": {
            "tokens": [int(t) for t in node_tokens.tolist()],
            "depths": [int(d) for d in node_depths.tolist()],
            "parents": [int(p) for p in parents],
        },
        "walks": walks,
    }


def reference_revision(checkout):
    try:
        return subprocess.run(
            ["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("reference", type=Path, help="checkout of github.com/liranringel/ddtree")
    parser.add_argument("--out", type=Path, default=Path("fixtures/trees/reference_trees.json"))
    parser.add_argument("--cases", type=int, default=198)
    parser.add_argument("--seed", type=int, default=20240611)
    parser.add_argument("--reference-rev", default=None, help="commit to record (default: git rev-parse)")
    args = parser.parse_args()

    sys.path.insert(0, str(args.reference.resolve()))
    import ddtree as reference

    if not torch.cuda.is_available():
        # The reference times its stages with torch.cuda.synchronize(); timing only.
        reference.cuda_time = time.perf_counter

    rng = random.Random(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    cases = [make_case(i, reference, rng, gen) for i in range(args.cases)]
    cases += [make_case(args.cases + i, reference, rng, gen, budget=0) for i in range(2)]

    fixture = {
        "source": "tools/make_tree_fixtures.py",
        "reference": "github.com/liranringel/ddtree ddtree.py: build_ddtree_tree, follow_verified_tree",
        "reference_rev": args.reference_rev or reference_revision(args.reference),
        "seed": args.seed,
        "torch": torch.__version__,
        "cases": cases,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(fixture, separators=(",", ":")) + "\n")
    print(f"wrote {len(cases)} cases to {args.out} ({args.out.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
