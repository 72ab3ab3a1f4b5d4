#!/usr/bin/env python3
"""PyTorch / transformers side of the side-by-side benchmark against the Rust engine (crates/ddtree-bench): the forwards
a DDTree round costs, timed on random-weight models of real shapes (Qwen3-8B target, a 5-layer DFlash-shaped drafter).

The H200 run (from the repository root; one GPU, no network, no downloads; ~1 min, plus <= 2 min for --compiled):

    python tools/bench_transformers.py --self-check && \
    python tools/bench_transformers.py --compiled > bench_transformers.jsonl

Defaults: --device cuda --dtype bfloat16 --context 2048 --budgets 16,32,64,128 --warmup 5 --reps 20, Qwen3-8B shapes
(every shape number has a flag). A CPU smoke test with tiny shapes (~15 s; with --compiled ~1 min):

    /work/pyenv/bin/python tools/bench_transformers.py --layers 2 --hidden 256 --heads 4 --kv-heads 2 --head-dim 64 \
        --intermediate 512 --vocab 1000 --context 64 --device cpu --dtype float32

Output: one JSON object per line on stdout, a human-readable table and all logs on stderr. Lines, in order:
"machine" (device name, torch / transformers / CUDA versions), "setup" (build time, parameter counts, weight GiB),
one per timed step {"step", "mode", "ms_median", "ms_min", "reps", "wall_ms_median", rows, kv_len, shapes, dtype,
device, attn_implementation, ...}, and "memory" (peak memory, total run time).

Steps (C = --context):

* prefill: the C-token random prompt into an empty DynamicCache (3 reps after 1 warm-up; for reference).
* ar: one decode step, model(input_ids=[[t]], position_ids=[[C]], past_key_values=cache, logits_to_keep=1) over the
  prefilled DynamicCache; the cache is cropped back to C after every step, so every step sees the same context.
* verify (per budget B): B + 1 rows (root + B nodes), position ids C + depth, a 4-D additive float mask
  [1, 1, B+1, C+B+1] (0 = visible, finfo(dtype).min = hidden: every row sees the whole context, its tree ancestors and
  itself), logits for all rows (logits_to_keep=0), cache cropped back after each step. The tree is fixed and seeded:
  node 0 is the root (depth 0); node i >= 1 takes the parent floor(u^2 * i), u uniform in [0, 1) from
  random.Random(seed + B) (an earlier node, biased toward early ones: the rule of crates/ddtree-bench's RandomTree,
  not its random numbers); depth = parent's depth + 1; ancestors = parent's ancestors + parent (the boolean mask row is
  the parent's row plus the diagonal). The mask is dense, so timings do not depend on the tree's shape.
* draft: DFlash drafter shapes: a separate 5-layer Qwen3Model of the target's width (sharing the target's input
  embeddings; no LM head of its own) over 16 query rows (last token + 15 mask tokens, positions C..C+15) with
  bidirectional attention (no mask, is_causal=False on its attention modules, as in the DFlash reference) on top of a
  C-row DynamicCache; then the target's lm_head on the last 15 rows and torch.topk(log_softmax(logits.float()), k=8).
  An approximation (the line's "note" says so): in the real drafter the context K/V come from projected target hidden
  features, and each round also appends K/V for the newly accepted tokens.
* ar, mode static+cudagraphs (--compiled): transformers' StaticCache + model.get_compiled_call(CompileConfig())
  (inductor, mode="reduce-overhead" = CUDA graphs; what generate() uses for static-cache decoding); eager prefill, then
  the decode step with every layer's cumulative_length reset to C after each step. It runs in a child process (this
  script with --compiled-child, after the parent freed its models) that is killed with its process group when it
  exceeds --compile-budget-s wall-clock seconds (its import + build + compile + graph capture + timing); on failure or
  timeout the line has "error" instead of timings. It also reports compile_s, the max |logits - eager DynamicCache
  logits| of the same step (absolute and relative to max |logit|), inductor's cudagraph_skips (should be 0 on CUDA)
  and dynamo's graph breaks.

Timing: --warmup untimed iterations, then --reps timed ones. Each timed rep starts on an idle device (synchronize), is
timed with CUDA events (ms_*: launch + execution; wall_ms_median: perf_counter including the final synchronize), and
is followed by the untimed cache crop. On the CPU, ms_* are perf_counter times.

Weights: built under torch.device(device) with transformers' no_init_weights() (nothing initialised or allocated on
the CPU), then filled in place on the device: weight matrices and embeddings ~ normal(0, 0.02), RMSNorm weights = 1.
attn_implementation="sdpa" for both models. No checkpoint is read.

--self-check (then exit 0, or 1 on a mismatch): tiny shapes, on the CPU in float32 (relative tolerance 1e-4) and
again on --device in --dtype unless that is the CPU in float32 (tolerance 4e-2 in 16-bit). Checks that transformers
honours a custom 4-D float mask with sdpa: row i of a tree verify equals a separate plain forward of prefix + the
root..i path, while transformers' causal mask over the same rows does not (negative control); that crop restores the
cache; that the drafter's no-mask, is_causal=False attention equals an explicit all-visible 4-D mask and differs from
a causal one; that the StaticCache step with the cumulative_length reset equals the DynamicCache step.

Written against torch 2.11 and transformers 5.17 (Cache.crop takes a negative count of tokens to drop there; the
positive "final length" form is deprecated).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import resource
import signal
import statistics
import subprocess
import sys
import time

import torch
import transformers
from transformers import AutoModel, AutoModelForCausalLM, DynamicCache, Qwen3Config, StaticCache
from transformers.generation.configuration_utils import CompileConfig
from transformers.initialization import no_init_weights

DRAFT_NOTE = (
    "approximates DFlash: 5-layer Qwen3 stack of the target's width, 16 query rows, bidirectional attention over a "
    "token-prefilled KV cache; in the real drafter the context K/V come from projected target hidden features"
)


# ----------------------------------------------------------------------------------------------------------------------
# model construction


def make_config(a: argparse.Namespace, layers: int | None = None) -> Qwen3Config:
    return Qwen3Config(
        hidden_size=a.hidden,
        num_hidden_layers=layers if layers is not None else a.layers,
        num_attention_heads=a.heads,
        num_key_value_heads=a.kv_heads,
        head_dim=a.head_dim,
        intermediate_size=a.intermediate,
        vocab_size=a.vocab,
        tie_word_embeddings=False,
        max_position_embeddings=a.max_positions,
        rope_theta=a.rope_theta,
    )


@torch.no_grad()
def init_random_(model: torch.nn.Module, std: float) -> None:
    """In place, on the model's device: RMSNorm weights = 1, every other parameter ~ normal(0, std)."""
    for module in model.modules():
        for p in module.parameters(recurse=False):
            if "RMSNorm" in type(module).__name__:
                p.fill_(1.0)
            else:
                p.normal_(0.0, std)


def build_models(cfg: Qwen3Config, draft_cfg: Qwen3Config | None, device: torch.device, dtype: torch.dtype,
                 std: float):
    """Target (Qwen3ForCausalLM) and drafter (bare Qwen3Model sharing the target's input embeddings, or None if
    draft_cfg is None), random weights."""
    # no_init_weights: skip torch's and transformers' init (we fill the weights ourselves right after, on the device)
    with torch.device(device), no_init_weights():
        target = AutoModelForCausalLM.from_config(cfg, dtype=dtype, attn_implementation="sdpa")
        draft = AutoModel.from_config(draft_cfg, dtype=dtype, attn_implementation="sdpa") if draft_cfg else None
    init_random_(target, std)
    # rotary inv_freq is a buffer computed at construction: make sure it did not land on another device
    assert target.model.rotary_emb.inv_freq.device.type == device.type
    if draft is None:
        return target.eval(), None
    draft.embed_tokens = target.get_input_embeddings()  # DFlash embeds its block with the target's embeddings
    init_random_(draft.layers, std)
    init_random_(draft.norm, std)
    for layer in draft.layers:
        layer.self_attn.is_causal = False  # bidirectional block: sdpa gets no mask and is_causal=False
    return target.eval(), draft.eval()


def draft_forward(draft, embeds, position_ids, cache):
    """Drafter forward. A dict mask bypasses transformers' mask creation: no mask at all, so with is_causal=False every
    query row sees every cached row and every block row."""
    return draft(
        inputs_embeds=embeds, position_ids=position_ids, past_key_values=cache, use_cache=True,
        attention_mask={"full_attention": None},
    ).last_hidden_state


# ----------------------------------------------------------------------------------------------------------------------
# tree


def random_tree(n_nodes: int, seed: int) -> tuple[list[int], list[int]]:
    """Parents and depths of a seeded random tree: node 0 is the root; node i's parent is floor(u^2 * i), u uniform in
    [0, 1) -- an earlier node, biased toward early ones (bushy near the root like a best-first tree; the same rule as
    crates/ddtree-bench's RandomTree, though not the same random numbers)."""
    rng = random.Random(seed)
    parents, depths = [-1], [0]
    for i in range(1, n_nodes):
        p = int(rng.random() ** 2 * i)
        parents.append(p)
        depths.append(depths[p] + 1)
    return parents, depths


def ancestors(parents: list[int], i: int) -> list[int]:
    path = []
    while i >= 0:
        path.append(i)
        i = parents[i]
    return path[::-1]  # root .. i


def tree_mask(parents: list[int], context: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Additive 4-D mask [1, 1, N, context + N]: 0 where visible (the context, ancestors, self), finfo.min elsewhere."""
    n = len(parents)
    visible = torch.zeros(n, n, dtype=torch.bool)
    for i in range(n):
        if parents[i] >= 0:
            visible[i] = visible[parents[i]]  # parent's ancestors and the parent itself (parents[i] < i)
        visible[i, i] = True
    mask = torch.zeros(1, 1, n, context + n, dtype=dtype)
    mask[0, 0, :, context:] = torch.where(visible, 0.0, torch.finfo(dtype).min).to(dtype)
    return mask.to(device)


# ----------------------------------------------------------------------------------------------------------------------
# helpers


def crop_to(cache, length: int) -> None:
    extra = cache.get_seq_length() - length
    if extra > 0:
        cache.crop(-extra)  # transformers 5.17: a negative argument = number of tokens to drop


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def positions(start: int, n: int, device) -> torch.Tensor:
    return torch.arange(start, start + n, device=device)[None]


def prefill(model, prompt: torch.Tensor, cache) -> torch.Tensor:
    return model(
        input_ids=prompt, position_ids=positions(0, prompt.shape[1], prompt.device), past_key_values=cache,
        use_cache=True, logits_to_keep=1,
    ).logits


def ar_inputs(a, device):
    """The AR step's prompt and token (the same in the eager run and in the compiled child)."""
    gen = torch.Generator(device="cpu").manual_seed(a.seed)
    prompt = torch.randint(0, a.vocab, (1, a.context), generator=gen).to(device)
    tok = torch.randint(0, a.vocab, (1, 1), generator=gen).to(device)
    return prompt, tok


def time_steps(fn, after, device: torch.device, warmup: int, reps: int) -> dict:
    """Run fn() warmup + reps times, after() (untimed) after each; each timed rep starts on an idle device."""
    for _ in range(warmup):
        fn()
        after()
    sync(device)
    ms, wall = [], []
    cuda = device.type == "cuda"
    for _ in range(reps):
        sync(device)
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            t0 = time.perf_counter()
            start.record()
            fn()
            end.record()
            end.synchronize()
            wall.append((time.perf_counter() - t0) * 1e3)
            ms.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            fn()
            ms.append((time.perf_counter() - t0) * 1e3)
            wall.append(ms[-1])
        after()
    return {
        "ms_median": round(statistics.median(ms), 4), "ms_min": round(min(ms), 4), "reps": reps,
        "wall_ms_median": round(statistics.median(wall), 4),
    }


def rel_diff(x: torch.Tensor, ref: torch.Tensor) -> float:
    x, ref = x.float(), ref.float()
    return float((x - ref).abs().max() / ref.abs().max().clamp_min(1e-30))


def emit(record: dict) -> None:
    print(json.dumps(record), flush=True)


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------------------------------------------------
# benchmark steps


@torch.no_grad()
def bench_eager(a, target, draft, device, shape, results) -> None:
    """prefill, ar, verify, draft (eager)."""
    C, vocab = a.context, a.vocab
    prompt, tok = ar_inputs(a, device)
    gen = torch.Generator(device="cpu").manual_seed(a.seed + 1)

    # prefill (a fresh cache per rep, made outside the timed region)
    times = []
    for rep in range(1 + a.prefill_reps):
        cache = DynamicCache(config=target.config)
        sync(device)
        t0 = time.perf_counter()
        prefill(target, prompt, cache)
        sync(device)
        if rep > 0:  # rep 0 = warm-up
            times.append((time.perf_counter() - t0) * 1e3)
    results.append({"step": "prefill", "mode": "eager", "ms_median": round(statistics.median(times), 4),
                    "ms_min": round(min(times), 4), "reps": len(times), "rows": C, "kv_len": C, **shape})
    emit(results[-1])
    assert cache.get_seq_length() == C

    # ar: one token at position C, cache cropped back to C after each step
    pos = positions(C, 1, device)
    ar = lambda: target(input_ids=tok, position_ids=pos, past_key_values=cache, use_cache=True, logits_to_keep=1)
    r = time_steps(ar, lambda: crop_to(cache, C), device, a.warmup, a.reps)
    results.append({"step": "ar", "mode": "eager", **r, "rows": 1, "kv_len": C + 1, "cache": "DynamicCache", **shape})
    emit(results[-1])

    # verify: B + 1 rows with the tree mask, logits for all rows
    for B in a.budgets:
        n = B + 1
        parents, depths = random_tree(n, a.seed + B)
        ids = torch.randint(0, vocab, (1, n), generator=gen).to(device)
        vpos = torch.tensor([[C + d for d in depths]], device=device)
        mask = tree_mask(parents, C, target.dtype, device)
        step = lambda: target(input_ids=ids, position_ids=vpos, attention_mask=mask, past_key_values=cache,
                              use_cache=True, logits_to_keep=0)
        r = time_steps(step, lambda: crop_to(cache, C), device, a.warmup, a.reps)
        results.append({"step": "verify", "mode": "eager", "budget": B, **r, "rows": n, "kv_len": C + n,
                        "tree_max_depth": max(depths), "mask": "4-D additive float", **shape})
        emit(results[-1])
    del cache

    # draft: 16 bidirectional rows over a C-row drafter cache, lm_head on 15 rows, top-8 log-probs
    dcache = DynamicCache(config=draft.config)
    embed = target.get_input_embeddings()
    draft_forward(draft, embed(prompt), positions(0, C, device), dcache)
    assert dcache.get_seq_length() == C
    block = a.block
    block_ids = torch.full((1, block), a.mask_token % vocab, device=device)  # -1 -> vocab - 1
    block_ids[0, 0] = tok[0, 0]
    dpos = positions(C, block, device)

    def draft_step():
        h = draft_forward(draft, embed(block_ids), dpos, dcache)
        logits = target.lm_head(h[:, 1:, :])
        return torch.topk(torch.log_softmax(logits.float(), dim=-1), k=a.topk)

    r = time_steps(draft_step, lambda: crop_to(dcache, C), device, a.warmup, a.reps)
    results.append({"step": "draft", "mode": "eager", **r, "rows": block, "kv_len": C + block,
                    "draft_layers": a.draft_layers, "lm_head_rows": block - 1, "topk": a.topk, "note": DRAFT_NOTE,
                    **shape})
    emit(results[-1])
    del dcache


@torch.no_grad()
def bench_compiled_ar(a, target, device, shape) -> dict:
    """AR step with StaticCache + torch.compile(mode="reduce-overhead") (CUDA graphs on CUDA). Runs in the child."""
    C = a.context
    mode = "static+cudagraphs" if device.type == "cuda" else "static+compiled"
    max_len = -(-(C + 1) // 16) * 16  # room for the decode token, rounded up to a multiple of 16
    rec = {"step": "ar", "mode": mode, "rows": 1, "kv_len": C + 1, "cache": "StaticCache", "max_cache_len": max_len,
           "compile_config": "CompileConfig() = inductor, mode=reduce-overhead, fullgraph=False", **shape}
    prompt, tok = ar_inputs(a, device)
    pos = positions(C, 1, device)
    try:
        from torch._dynamo.utils import counters

        # eager DynamicCache reference for the same step
        dcache = DynamicCache(config=target.config)
        prefill(target, prompt, dcache)
        ref = target(input_ids=tok, position_ids=pos, past_key_values=dcache, use_cache=True,
                     logits_to_keep=1).logits.float()
        del dcache

        cache = StaticCache(config=target.config, max_cache_len=max_len)
        prefill(target, prompt, cache)  # eager prefill (allocates the static tensors, marks their addresses static)
        compiled = target.get_compiled_call(CompileConfig())

        def reset():  # every step writes the token at slot C and sees C + 1 keys
            for layer in cache.layers:
                layer.cumulative_length.fill_(C)

        def step():
            if device.type == "cuda":
                torch.compiler.cudagraph_mark_step_begin()
            return compiled(input_ids=tok, position_ids=pos, past_key_values=cache, use_cache=True,
                            logits_to_keep=1).logits

        t0 = time.perf_counter()
        for _ in range(3):  # compile, cudagraph warm-up run, cudagraph recording
            step()
            reset()
        sync(device)
        rec["compile_s"] = round(time.perf_counter() - t0, 2)
        logits = step().float().clone()
        reset()
        # same step, same inputs: only kernel rounding may differ (random-weight logits are too flat for an argmax test)
        rec["max_abs_diff_vs_eager"] = float((logits - ref).abs().max())
        rec["rel_diff_vs_eager"] = rel_diff(logits, ref)
        rec.update(time_steps(step, reset, device, a.warmup, a.reps))
        rec["cudagraph_skips"] = int(counters["inductor"]["cudagraph_skips"])
        rec["graph_breaks"] = int(sum(counters["graph_break"].values()))
        if device.type == "cuda":
            rec["child_peak_allocated_gib"] = round(torch.cuda.max_memory_allocated(device) / 2**30, 3)
    except Exception as e:  # noqa: BLE001 -- report the failure instead of dying
        rec["error"] = f"{type(e).__name__}: {e}"[:2000]
    return rec


def run_compiled_child(a, shape) -> dict:
    """Run the compiled AR step in a child process (this script with --compiled-child) under a hard wall-clock limit
    of --compile-budget-s; kill its whole process group (inductor compile workers included) when it runs over."""
    mode = "static+cudagraphs" if a.device.startswith("cuda") else "static+compiled"
    rec = {"step": "ar", "mode": mode, "rows": 1, "kv_len": a.context + 1, "cache": "StaticCache", **shape}
    argv = [sys.executable, os.path.abspath(__file__), *[x for x in sys.argv[1:] if x != "--compiled"],
            "--compiled-child"]
    t0 = time.perf_counter()
    child = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, _ = child.communicate(timeout=a.compile_budget_s)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        child.communicate()
        rec["error"] = f"timeout: compiled child ran over --compile-budget-s {a.compile_budget_s} s (killed)"
        rec["elapsed_s"] = round(time.perf_counter() - t0, 2)
        return rec
    for line in out.splitlines():
        if line.startswith("{"):
            child_rec = json.loads(line)
            if child_rec.get("step") == "ar":
                child_rec["child_s"] = round(time.perf_counter() - t0, 2)
                return child_rec
    rec["error"] = f"compiled child exited with rc {child.returncode} and no result (its stderr is above)"
    rec["elapsed_s"] = round(time.perf_counter() - t0, 2)
    return rec


# ----------------------------------------------------------------------------------------------------------------------
# self-check


@torch.no_grad()
def self_check(device: torch.device, dtype: torch.dtype) -> list[dict]:
    """Tiny-shape checks of the mechanisms the benchmark relies on. Returns one record per check."""
    tiny = argparse.Namespace(hidden=64, layers=2, heads=4, kv_heads=2, head_dim=16, intermediate=128, vocab=101,
                              max_positions=512, rope_theta=1e6)
    torch.manual_seed(0)
    target, draft = build_models(make_config(tiny), make_config(tiny, layers=2), device, dtype, std=0.1)
    # bf16 rounding alone gives ~1e-2 between a tree row and its path forward; a wrong mask gives ~0.5
    tol = 1e-4 if dtype == torch.float32 else 4e-2
    differ = 0.2  # negative controls must differ by more than this
    P, n_nodes, block = 13, 12, 16
    gen = torch.Generator(device="cpu").manual_seed(1)
    prefix = torch.randint(0, tiny.vocab, (1, P), generator=gen).to(device)
    parents, depths = random_tree(n_nodes, 3)
    assert any(parents[i] != i - 1 for i in range(1, n_nodes)), "tree must not be a chain"
    ids = torch.randint(0, tiny.vocab, (1, n_nodes), generator=gen).to(device)
    vpos = torch.tensor([[P + d for d in depths]], device=device)
    out = []

    def record(name, diff, ok, **kw):
        out.append({"step": "self_check", "check": name, "device": str(device), "dtype": str(dtype).split(".")[-1],
                    "rel_diff": diff, "tol": tol, "ok": bool(ok), **kw})

    # 1. tree verify (4-D float mask via sdpa) vs a plain causal forward of prefix + root..i for every row i
    cache = DynamicCache(config=target.config)
    prefill(target, prefix, cache)
    mask = tree_mask(parents, P, dtype, device)
    tree_logits = target(input_ids=ids, position_ids=vpos, attention_mask=mask, past_key_values=cache,
                         use_cache=True, logits_to_keep=0).logits[0]
    path_logits = []
    for i in range(n_nodes):
        path = torch.cat([prefix, ids[:, ancestors(parents, i)]], dim=1)
        path_logits.append(target(input_ids=path, use_cache=False, logits_to_keep=1).logits[0, -1])
    path_logits = torch.stack(path_logits)
    d = rel_diff(tree_logits, path_logits)
    record("tree_verify_vs_paths", d, d <= tol, nodes=n_nodes, prefix=P,
           attn_implementation=target.config._attn_implementation)

    # 1b. negative control: the same rows under transformers' own causal mask must differ from the paths
    crop_to(cache, P)
    causal_logits = target(input_ids=ids, position_ids=vpos, past_key_values=cache, use_cache=True,
                           logits_to_keep=0).logits[0]
    d = rel_diff(causal_logits, path_logits)
    record("causal_mask_differs_from_paths", d, d > differ)

    # 2. crop restores the cache: an AR step after verify + crop equals a fresh forward of prefix + token
    crop_to(cache, P)
    tok = ids[:, :1]
    ar = target(input_ids=tok, position_ids=positions(P, 1, device), past_key_values=cache, use_cache=True,
                logits_to_keep=1).logits[0, -1]
    fresh = target(input_ids=torch.cat([prefix, tok], 1), use_cache=False, logits_to_keep=1).logits[0, -1]
    d = rel_diff(ar, fresh)
    record("crop_then_ar_vs_fresh", d, d <= tol and cache.get_seq_length() == P + 1)

    # 3. drafter: no mask + is_causal=False == explicit all-visible 4-D mask, != causal
    embed = target.get_input_embeddings()
    dcache = DynamicCache(config=draft.config)
    draft_forward(draft, embed(prefix), positions(0, P, device), dcache)
    bids = torch.randint(0, tiny.vocab, (1, block), generator=gen).to(device)
    dpos = positions(P, block, device)
    h_free = draft_forward(draft, embed(bids), dpos, dcache)
    crop_to(dcache, P)
    zeros = torch.zeros(1, 1, block, P + block, dtype=dtype, device=device)
    h_mask = draft(inputs_embeds=embed(bids), position_ids=dpos, past_key_values=dcache, use_cache=True,
                   attention_mask=zeros).last_hidden_state
    crop_to(dcache, P)
    d = rel_diff(h_free, h_mask)
    record("draft_nomask_vs_allvisible_mask", d, d <= tol)
    causal = torch.full((block, block), torch.finfo(dtype).min, dtype=dtype, device=device).triu(1)
    cmask = torch.cat([torch.zeros(block, P, dtype=dtype, device=device), causal], 1)[None, None]
    h_causal = draft(inputs_embeds=embed(bids), position_ids=dpos, past_key_values=dcache, use_cache=True,
                     attention_mask=cmask).last_hidden_state
    d = rel_diff(h_causal, h_free)
    record("draft_causal_differs", d, d > differ)

    # 4. StaticCache step with cumulative_length reset (what the compiled AR step does, here uncompiled) == dynamic
    scache = StaticCache(config=target.config, max_cache_len=P + 16)
    prefill(target, prefix, scache)
    steps = []
    for _ in range(2):
        steps.append(target(input_ids=tok, position_ids=positions(P, 1, device), past_key_values=scache,
                            use_cache=True, logits_to_keep=1).logits[0, -1])
        for layer in scache.layers:
            layer.cumulative_length.fill_(P)
    d = max(rel_diff(steps[0], fresh), rel_diff(steps[1], fresh))
    record("static_cache_reset_vs_fresh", d, d <= tol)
    return out


# ----------------------------------------------------------------------------------------------------------------------
# main


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    s = p.add_argument_group("shapes (defaults: Qwen3-8B)")
    s.add_argument("--layers", type=int, default=36)
    s.add_argument("--hidden", type=int, default=4096)
    s.add_argument("--heads", type=int, default=32)
    s.add_argument("--kv-heads", type=int, default=8)
    s.add_argument("--head-dim", type=int, default=128)
    s.add_argument("--intermediate", type=int, default=12288)
    s.add_argument("--vocab", type=int, default=151936)
    s.add_argument("--max-positions", type=int, default=40960)
    s.add_argument("--rope-theta", type=float, default=1e6)
    s.add_argument("--draft-layers", type=int, default=5)
    s.add_argument("--block", type=int, default=16, help="drafter query rows (DFlash block size)")
    s.add_argument("--topk", type=int, default=8)
    s.add_argument("--mask-token", type=int, default=-1, help="drafter's mask token id (default -1: vocab - 1)")
    b = p.add_argument_group("benchmark")
    b.add_argument("--context", type=int, default=2048)
    b.add_argument("--budgets", type=lambda x: [int(v) for v in x.split(",")], default=[16, 32, 64, 128])
    b.add_argument("--device", default="cuda")
    b.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    b.add_argument("--warmup", type=int, default=5)
    b.add_argument("--reps", type=int, default=20)
    b.add_argument("--prefill-reps", type=int, default=3)
    b.add_argument("--seed", type=int, default=0)
    b.add_argument("--init-std", type=float, default=0.02)
    b.add_argument("--compiled", action="store_true", help="also time the AR step with StaticCache + reduce-overhead")
    b.add_argument("--compile-budget-s", type=int, default=120,
                   help="wall-clock limit of the compiled-AR child process (import, build, compile, capture, timing)")
    b.add_argument("--compiled-child", action="store_true", help=argparse.SUPPRESS)  # internal: see run_compiled_child
    b.add_argument("--self-check", action="store_true", help="run the tiny-shape correctness checks and exit 0/1")
    a = p.parse_args()
    if a.warmup < 0 or a.reps < 1:
        p.error("--warmup must be >= 0 and --reps >= 1")
    return a


def machine_record(device: torch.device) -> dict:
    rec = {"step": "machine", "device": str(device), "torch": torch.__version__,
           "transformers": transformers.__version__, "python": platform.python_version(),
           "cuda": torch.version.cuda, "platform": platform.platform()}
    if device.type == "cuda":
        rec["device_name"] = torch.cuda.get_device_name(device)
        rec["capability"] = ".".join(map(str, torch.cuda.get_device_capability(device)))
        rec["device_mem_gib"] = round(torch.cuda.get_device_properties(device).total_memory / 2**30, 1)
        rec["cudnn"] = torch.backends.cudnn.version()
    else:
        rec["device_name"] = platform.processor() or platform.machine()
        rec["threads"] = torch.get_num_threads()
    return rec


def print_table(results: list[dict]) -> None:
    log("")
    log(f"{'step':<8} {'mode':<18} {'budget':>6} {'rows':>5} {'kv_len':>7} {'ms_median':>10} {'ms_min':>9} {'reps':>5}")
    for r in results:
        if r["step"] not in ("prefill", "ar", "verify", "draft"):
            continue
        if "error" in r:
            log(f"{r['step']:<8} {r['mode']:<18} {'':>6} {r['rows']:>5} {r['kv_len']:>7}  error: {r['error'][:120]}")
            continue
        log(f"{r['step']:<8} {r['mode']:<18} {r.get('budget', ''):>6} {r['rows']:>5} {r['kv_len']:>7} "
            f"{r['ms_median']:>10.3f} {r['ms_min']:>9.3f} {r['reps']:>5}")


def main() -> int:
    a = parse_args()
    t_total = time.perf_counter()
    device = torch.device(a.device)
    dtype = getattr(torch, a.dtype)
    if device.type == "cuda" and not torch.cuda.is_available():
        log("CUDA is not available; pass --device cpu (with small shapes) to run on the CPU")
        return 2
    transformers.logging.set_verbosity_error()
    emit(machine_record(device))

    if a.self_check:
        records = self_check(torch.device("cpu"), torch.float32)
        if device.type != "cpu" or dtype != torch.float32:
            records += self_check(device, dtype)
        for r in records:
            emit(r)
        failed = [r["check"] + "@" + r["device"] for r in records if not r["ok"]]
        log("self-check: " + ("OK" if not failed else "FAILED: " + ", ".join(failed)))
        return 1 if failed else 0

    shape = {"layers": a.layers, "hidden": a.hidden, "heads": a.heads, "kv_heads": a.kv_heads, "head_dim": a.head_dim,
             "intermediate": a.intermediate, "vocab": a.vocab, "context": a.context, "dtype": a.dtype,
             "device": str(device), "attn_implementation": "sdpa"}
    torch.manual_seed(a.seed)
    t0 = time.perf_counter()
    draft_cfg = None if a.compiled_child else make_config(a, layers=a.draft_layers)
    target, draft = build_models(make_config(a), draft_cfg, device, dtype, a.init_std)
    sync(device)
    build_s = round(time.perf_counter() - t0, 2)
    assert target.config._attn_implementation == shape["attn_implementation"]
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    if a.compiled_child:  # internal: only the compiled AR step, one JSON line for the parent
        emit(bench_compiled_ar(a, target, device, {**shape, "build_s": build_s}))
        return 0

    target_params = sum(p.numel() for p in target.parameters())
    draft_params = sum(p.numel() for p in draft.layers.parameters()) + sum(p.numel() for p in draft.norm.parameters())
    setup = {"step": "setup", "build_s": build_s, "target_params": target_params, "draft_params": draft_params,
             "weights_gib": round((target_params + draft_params) * dtype.itemsize / 2**30, 3),
             "draft_attn_implementation": draft.config._attn_implementation, **shape}
    if device.type == "cuda":
        setup["allocated_after_build_gib"] = round(torch.cuda.memory_allocated(device) / 2**30, 3)
    emit(setup)

    results: list[dict] = []
    bench_eager(a, target, draft, device, shape, results)
    del target, draft
    if device.type == "cuda":
        torch.cuda.empty_cache()
    if a.compiled:
        log("compiling the AR step (StaticCache + reduce-overhead) in a child process ...")
        results.append(run_compiled_child(a, shape))
        emit(results[-1])

    mem = {"step": "memory", "total_s": round(time.perf_counter() - t_total, 2)}
    if device.type == "cuda":
        # peak of the eager steps: weights + caches + activations (stats reset after the build, which drops only the
        # drafter's discarded own embedding table); the compiled child reports its own (child_peak_allocated_gib)
        mem["peak_allocated_gib"] = round(torch.cuda.max_memory_allocated(device) / 2**30, 3)
        mem["peak_reserved_gib"] = round(torch.cuda.max_memory_reserved(device) / 2**30, 3)
    else:
        mem["max_rss_gib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 3)  # Linux: KiB
    emit(mem)
    print_table(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
