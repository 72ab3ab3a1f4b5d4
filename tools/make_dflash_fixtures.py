#!/usr/bin/env python3
"""Golden fixtures for the DFlash drafter and for the whole DDTree loop, made by the public reference code.

What it makes (pairs with `fixtures/qwen3-tiny-tied/`, made by tools/make_qwen3_fixtures.py):

* `fixtures/dflash-tiny/`, `fixtures/dflash-tiny-sliding/`: two tiny DFlash drafters in the z-lab checkpoint
  format (`config.json` laid out like z-lab/Qwen3-8B-DFlash-b16's, `model.safetensors` float32 with exactly
  the z-lab tensor names: `fc.weight`, `hidden_norm.weight`, `layers.N.*`, `norm.weight`; no embeddings, no
  LM head). Hidden 64, intermediate 128, 2 layers, 4 heads / 2 kv heads, head_dim 32, block_size 16,
  mask token 1023, target_layer_ids [0, 1] of the 3-layer target. `dflash-tiny` is all full attention;
  `dflash-tiny-sliding` has layer_types [sliding_attention, full_attention], sliding_window 8, no
  `is_causal` key (so the newest z-lab code makes layer 0 causal + windowed).
  The weights are initialised randomly (linears std 0.1, norms 1 +- 0.1) and then trained for a few hundred
  steps of AdamW, through the reference DFlashDraftModel.forward, to predict the target's own greedy
  continuations of the fixture prompts, so that drafts are partially right and rounds accept > 1 token.
  Each folder also has `expected.safetensors` + `expected.json`: draft logits etc. recorded from the z-lab
  reference `dflash_generate` (greedy), see fixtures/dflash-tiny/README.md.
* `fixtures/ddtree-loop/rounds.json`: the reference DDTree loop (liranringel/ddtree `ddtree_generate`, and its
  `dflash_generate` for the plain DFlash chain and for autoregressive decoding) run on the target with each
  drafter, per prompt and budget; every round's tree, verify inputs, posterior, accepted nodes, tau, bonus.

Run (from the repository root; ~20 s on one CPU thread, no network, no GPU; float32 on the CPU):

    git --git-dir=<mirror of liranringel/ddtree> archive HEAD | tar -x -C /tmp/refs/ddtree
    # z-lab/dflash: a checkout whose dflash/model.py has the layer-type mask rule (`_attention_mask`,
    # `_draft_value`, `input_embedding_scale`); the fixtures were made with the version indexed at commit
    # 10129599dffb338ff38cfd235a53ca6d3667b4dd (main at 44947fb, 2026-04-26, predates it and is refused).
    /work/pyenv/bin/python tools/make_dflash_fixtures.py \\
        --ddtree-repo /tmp/refs/ddtree --dflash-repo /tmp/refs/zlab-dflash-10129599

Reference code is imported from those checkouts at run time and patched only from here (CPU timing instead
of torch.cuda.synchronize, a stub `datasets` module for model/utils.py's unused dataset loader); nothing of
theirs is copied into this repository. ddtree's own drafter copy (model/dflash.py) is run as a cross-check.

Versions it was run with: Python 3.11, torch 2.11.0 (CPU), transformers 5.17.0, safetensors 0.8.0,
numpy 2.4.6, loguru 0.7.3; liranringel/ddtree c96427a. Runs single-threaded with fixed seeds and
deterministic algorithms: two runs on one machine give byte-identical files (a different CPU may round the
training differently and so give different, equally valid, weights: regenerate everything together).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import subprocess
import sys
import time
import types
import warnings
from pathlib import Path

import numpy as np
import safetensors
import torch
import torch.nn.functional as F
import transformers
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM, DynamicCache, Qwen3Config

PINNED = {"torch": "2.11.0", "transformers": "5.17.0"}
ZLAB_INDEXED_COMMIT = "10129599dffb338ff38cfd235a53ca6d3667b4dd"
DDTREE_COMMIT = "c96427a185677bf4133ed865dd1626a5041aef9b"

ROOT = Path(__file__).resolve().parent.parent
FIX = ROOT / "fixtures"
TARGET_DIR = FIX / "qwen3-tiny-tied"
LOOP_DIR = FIX / "ddtree-loop"

VOCAB = 1024
MASK_ID = 1023
BLOCK = 16
TARGET_LAYER_IDS = [0, 1]
SLIDING_WINDOW = 8
MAX_NEW_TOKENS = 48
BUDGETS = [0, 4, 16, 64]  # 0 = the reference's degenerate "tree of the root only"
TOPK_STORED = [4, 16, 64]
LOOP_PROMPTS = [0, 1]  # prompt0 (plain, 27 tokens) and prompt1 (chat, 48 tokens) of qwen3-tiny-tied
TRAIN_NEW_TOKENS = 80
GENERATED_FILES = ("config.json", "model.safetensors", "expected.safetensors", "expected.json")
DRAFT_TOL = 1e-4  # own re-implementation of the drafter vs the reference logits (measured ~1e-6)

DRAFTERS = {
    "dflash-tiny": dict(seed=31, sliding=False, train_steps=200),
    "dflash-tiny-sliding": dict(seed=47, sliding=True, train_steps=200),
}


# ----------------------------------------------------------------------------------------------
# Reference modules
# ----------------------------------------------------------------------------------------------


def cpu_time() -> float:
    return time.perf_counter()


def load_references(ddtree_repo: Path, dflash_repo: Path):
    model_py = dflash_repo / "dflash" / "model.py"
    if not model_py.is_file():
        sys.exit(f"{model_py} not found")
    spec = importlib.util.spec_from_file_location("zlab_dflash_model", model_py)
    zlab = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(zlab)
    for name in ("_attention_mask", "_draft_value", "_raw_input_embeddings", "_make_cache", "_crop_to"):
        if not hasattr(zlab, name):
            sys.exit(f"{model_py} lacks `{name}`: it predates the layer-type mask rule; use the version indexed at "
                     f"{ZLAB_INDEXED_COMMIT} (see this script's header)")
    zlab._cuda_time = cpu_time

    if not (ddtree_repo / "ddtree.py").is_file():
        sys.exit(f"{ddtree_repo}/ddtree.py not found")
    try:  # model/utils.py imports the `datasets` package for its benchmark loader only
        import datasets  # noqa: F401
    except ImportError:
        stub = types.ModuleType("datasets")
        for n in ("load_dataset", "Features", "Sequence", "Value"):
            setattr(stub, n, None)
        sys.modules["datasets"] = stub
    sys.path.insert(0, str(ddtree_repo))
    import ddtree as dd  # noqa: E402
    import dflash as dd_chain  # noqa: E402  (ddtree's dflash.py, not z-lab's package)
    import model as dd_model  # noqa: E402
    dd.cuda_time = cpu_time
    dd_chain.cuda_time = cpu_time
    return zlab, dd, dd_chain, dd_model


def git_head(repo: Path) -> str | None:
    try:
        return subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
    except Exception:
        return None


# ----------------------------------------------------------------------------------------------
# Target
# ----------------------------------------------------------------------------------------------


def load_target():
    target = AutoModelForCausalLM.from_pretrained(TARGET_DIR, dtype=torch.float32, attn_implementation="eager").eval()
    for p in target.parameters():
        p.requires_grad_(False)
    assert target.config.num_hidden_layers == 3 and target.config.hidden_size == 64
    return target


def prompts_from_target_fixture() -> list[list[int]]:
    t = load_file(str(TARGET_DIR / "expected.safetensors"))
    return [t[f"prompt{i}.input_ids"].tolist() for i in range(3)]


def greedy_ar(target, ids: list[int], n: int) -> list[int]:
    """Plain autoregressive greedy decoding (KV cache, argmax), our own loop."""
    cache = DynamicCache(config=target.config)
    out = target(torch.tensor([ids]), past_key_values=cache, use_cache=True)
    res = []
    for _ in range(n):
        nxt = out.logits[:, -1].argmax(-1, keepdim=True)
        res.append(int(nxt))
        out = target(nxt, past_key_values=cache, use_cache=True)
    return res


def features(target, ids: list[int]) -> torch.Tensor:
    hs = target(torch.tensor([ids]), use_cache=False, output_hidden_states=True).hidden_states
    return torch.cat([hs[i + 1] for i in TARGET_LAYER_IDS], -1)[0]


# ----------------------------------------------------------------------------------------------
# Drafter checkpoints
# ----------------------------------------------------------------------------------------------


def drafter_config(sliding: bool) -> dict:
    # Key set and layout of the released z-lab Qwen3 DFlash configs (transformers 4.57 era: top-level
    # rope_theta + rope_scaling null; block_size top level; mask_token_id / target_layer_ids in dflash_config).
    cfg = {
        "architectures": ["DFlashDraftModel"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "auto_map": {"AutoModel": "dflash.DFlashDraftModel"},
        "block_size": BLOCK,
        "bos_token_id": 1018,
        "dflash_config": {"mask_token_id": MASK_ID, "target_layer_ids": TARGET_LAYER_IDS},
        "dtype": "float32",
        "eos_token_id": 1020,
        "head_dim": 32,
        "hidden_act": "silu",
        "hidden_size": 64,
        "initializer_range": 0.02,
        "intermediate_size": 128,
        "layer_types": ["sliding_attention", "full_attention"] if sliding else ["full_attention", "full_attention"],
        "max_position_embeddings": 512,
        "max_window_layers": 2,
        "model_type": "qwen3",
        "num_attention_heads": 4,
        "num_hidden_layers": 2,
        "num_key_value_heads": 2,
        "num_target_layers": 3,
        "rms_norm_eps": 1e-06,
        "rope_scaling": None,
        "rope_theta": 1000000,
        "sliding_window": SLIDING_WINDOW if sliding else None,
        "tie_word_embeddings": False,
        "use_cache": True,
        "use_sliding_window": sliding,
        "vocab_size": VOCAB,
    }
    return cfg


def train_drafter(zlab, target, cfg: Qwen3Config, spec: dict, train_data) -> torch.nn.Module:
    """Random init (linears std 0.1, norms 1 +- 0.1), then a short AdamW run through the reference forward
    (no cache: K/V over [context window ; block], the reference's own masks) on the target's greedy
    continuations of the fixture prompts. Block = [token s, mask x 15], labels = tokens s+1..s+15, loss
    weights exp(-(k-1)/7) as in the DFlash paper. Context = the 24 features before s."""
    model = zlab.DFlashDraftModel(cfg)
    gen = torch.Generator().manual_seed(spec["seed"])
    with torch.no_grad():
        for name, p in sorted(model.named_parameters(), key=lambda kv: kv[0]):
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(0.1 * torch.randn(p.shape, generator=gen))
    steps, batch, window = spec["train_steps"], 8, 24
    emb = target.model.embed_tokens.weight
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda i: 0.5 * (1 + math.cos(math.pi * i / steps)))
    wts = torch.exp(-torch.arange(BLOCK - 1, dtype=torch.float32) / 7.0)
    model.train()
    with torch.enable_grad():
        for step in range(steps):
            feats, pos, blocks, labels = [], [], [], []
            for _ in range(batch):
                seq, ft, plen = train_data[int(torch.randint(0, len(train_data), (1,), generator=gen))]
                s = int(torch.randint(max(plen, window), len(seq) - BLOCK, (1,), generator=gen))
                feats.append(ft[s - window:s])
                pos.append(torch.arange(s - window, s + BLOCK))
                blk = torch.full((BLOCK,), MASK_ID)
                blk[0] = seq[s]
                blocks.append(blk)
                labels.append(seq[s + 1:s + BLOCK])
            h = model(target_hidden=torch.stack(feats), noise_embedding=F.embedding(torch.stack(blocks), emb),
                      position_ids=torch.stack(pos))
            logits = target.lm_head(h[:, 1:])
            ce = F.cross_entropy(logits.reshape(-1, VOCAB), torch.stack(labels).reshape(-1), reduction="none")
            loss = (ce.view(batch, BLOCK - 1) * wts).sum() / wts.sum() / batch
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            if step % 50 == 0 or step == steps - 1:
                print(f"    step {step:3d} loss {loss.item():.3f}")
    model.eval()
    return model


def write_drafter(zlab, target, name: str, spec: dict, train_data) -> tuple[torch.nn.Module, dict]:
    out = FIX / name
    out.mkdir(parents=True, exist_ok=True)
    for f in GENERATED_FILES:  # only what this script writes (dflash-tiny/README.md is hand-written)
        (out / f).unlink(missing_ok=True)
    cfg_dict = drafter_config(spec["sliding"])
    (out / "config.json").write_text(json.dumps(cfg_dict, indent=2) + "\n")
    cfg = Qwen3Config.from_pretrained(out)
    assert cfg.rope_parameters["rope_type"] == "default" and float(cfg.rope_parameters["rope_theta"]) == 1e6
    assert getattr(cfg, "is_causal", None) is None
    model = train_drafter(zlab, target, cfg, spec, train_data)
    sd = {k: v.detach().contiguous().to(torch.float32) for k, v in sorted(model.state_dict().items())}
    save_file(sd, str(out / "model.safetensors"), metadata={"format": "pt"})
    # Reload through the reference class exactly as the reference loaders do.
    m = zlab.DFlashDraftModel.from_pretrained(out, dtype=torch.float32).eval()
    rsd = m.state_dict()
    assert rsd.keys() == sd.keys() and all(torch.equal(rsd[k], sd[k]) for k in sd), "reload mismatch"
    names = sorted(load_file(str(out / "model.safetensors")).keys())
    assert not any("embed" in n or "lm_head" in n for n in names)
    assert [a.self_attn.is_causal for a in m.layers] == ([True, False] if spec["sliding"] else [False, False])
    assert [a.self_attn.sliding_window for a in m.layers] == ([SLIDING_WINDOW, None] if spec["sliding"] else [None, None])
    return m, cfg_dict


# ----------------------------------------------------------------------------------------------
# Own re-implementation of the drafter forward (checks the semantics written in the README)
# ----------------------------------------------------------------------------------------------


def rms(x, w, eps=1e-6):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def rope(x, pos, theta=1e6):
    d = x.shape[-1]
    inv = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
    ang = pos[:, None].to(torch.float32) * inv[None, :]
    cos, sin = torch.cat([ang.cos(), ang.cos()], -1), torch.cat([ang.sin(), ang.sin()], -1)
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return x * cos[:, None, :] + torch.cat([-x2, x1], -1) * sin[:, None, :]


def own_draft_logits(sd: dict, cfg: dict, lm_head_w, embed_w, all_feats, block_ids, start):
    """Stateless: context = ALL committed features (positions 0..start-1), block at start..start+b-1."""
    H, nh, nkv, hd = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    n, b = all_feats.shape[0], len(block_ids)
    assert n == start
    ctx = rms(all_feats @ sd["fc.weight"].T, sd["hidden_norm.weight"])  # [n, H], shared by every layer
    h = embed_w[torch.tensor(block_ids)]  # noise embedding, scale 1
    pos_k = torch.arange(0, start + b)
    pos_q = torch.arange(start, start + b)
    for li, lt in enumerate(cfg["layer_types"]):
        p = f"layers.{li}."
        x = rms(h, sd[p + "input_layernorm.weight"])
        q = rms((x @ sd[p + "self_attn.q_proj.weight"].T).view(b, nh, hd), sd[p + "self_attn.q_norm.weight"])
        kv_in = torch.cat([ctx, x], 0)  # context rows are NOT input-layernormed; block rows are
        k = rms((kv_in @ sd[p + "self_attn.k_proj.weight"].T).view(n + b, nkv, hd), sd[p + "self_attn.k_norm.weight"])
        v = (kv_in @ sd[p + "self_attn.v_proj.weight"].T).view(n + b, nkv, hd)
        q, k = rope(q, pos_q), rope(k, pos_k)
        k, v = k.repeat_interleave(nh // nkv, 1), v.repeat_interleave(nh // nkv, 1)
        s = torch.einsum("qhd,khd->hqk", q, k) / math.sqrt(hd)
        vis = torch.ones(b, n + b, dtype=torch.bool)
        if lt == "sliding_attention":  # causal + window: key pos in (qpos - W, qpos]
            W = cfg["sliding_window"]
            vis &= (pos_k[None, :] <= pos_q[:, None]) & (pos_q[:, None] - pos_k[None, :] < W)
        s = s.masked_fill(~vis[None], float("-inf"))
        a = torch.einsum("hqk,khd->qhd", s.softmax(-1), v).reshape(b, nh * hd)
        h = h + a @ sd[p + "self_attn.o_proj.weight"].T
        x = rms(h, sd[p + "post_attention_layernorm.weight"])
        m = F.silu(x @ sd[p + "mlp.gate_proj.weight"].T) * (x @ sd[p + "mlp.up_proj.weight"].T)
        h = h + m @ sd[p + "mlp.down_proj.weight"].T
    return rms(h, sd["norm.weight"])[1:] @ lm_head_w.T


# ----------------------------------------------------------------------------------------------
# Drafter fixture: rounds of z-lab's dflash_generate, instrumented
# ----------------------------------------------------------------------------------------------


def stored_rows(cache) -> list[int]:
    return [0 if (getattr(l, "keys", None) is None or l.keys.numel() == 0) else int(l.keys.shape[-2])
            for l in cache.layers]


class Patch:
    """Temporarily replace attributes; restores them on exit."""

    def __init__(self, *triples):
        self.triples, self.saved = triples, []

    def __enter__(self):
        for obj, name, new in self.triples:
            self.saved.append((obj, name, obj.__dict__.get(name, None), name in obj.__dict__))
            setattr(obj, name, new)
        return self

    def __exit__(self, *exc):
        for obj, name, old, had in reversed(self.saved):
            if had:
                setattr(obj, name, old)
            else:
                delattr(obj, name)


def topk_like_ddtree(logits: torch.Tensor, k: int):
    """What build_ddtree_tree computes before its heap: top-k of the float logits, minus logsumexp."""
    lg = logits.float()
    top_logits, top_ids = torch.topk(lg, k=min(k, lg.shape[-1]), dim=-1)
    return top_logits - torch.logsumexp(lg, dim=-1, keepdim=True), top_ids


def record_zlab_generate(zlab, drafter, target, ids: list[int], max_new: int):
    rounds, pending, state = [], {}, {}
    orig_fwd, orig_emb, orig_crop, orig_logits = (drafter.forward, zlab._raw_input_embeddings, zlab._crop_to,
                                                  drafter.compute_logits)

    def emb(tgt, input_ids, scale=1.0):
        pending["block_ids"] = input_ids[0].tolist()
        pending["input_embedding_scale"] = scale
        return orig_emb(tgt, input_ids, scale)

    def fwd(**kw):
        cache = kw["past_key_values"]
        state["draft_cache"] = cache
        pending.update(position_ids=kw["position_ids"][0].tolist(), context_features=kw["target_hidden"][0].clone(),
                       cache_len_before=cache.get_seq_length(), stored_rows_before=stored_rows(cache))
        out = orig_fwd(**kw)
        pending.update(cache_len_after_forward=cache.get_seq_length(), stored_rows_after_forward=stored_rows(cache),
                       draft_hidden=out[0, 1 - len(pending["block_ids"]):].clone())
        return out

    def logits_fn(hidden, head):
        lg = orig_logits(hidden, head)
        pending["draft_logits"] = lg[0].clone()
        rounds.append(dict(pending))
        pending.clear()
        return lg

    def crop(cache, length):
        orig_crop(cache, length)
        if cache is state.get("draft_cache"):
            pending["__crop"] = (length, cache.get_seq_length(), stored_rows(cache))

    # Hidden states inside the drafter (entry 0 = noise embedding, l = output of layer l-1).
    layer_outs = []
    hooks = [l.register_forward_hook(lambda m, a, o: layer_outs.append(o[0].clone())) for l in drafter.layers]

    def crop_wrapper(cache, length):
        crop(cache, length)
        if "__crop" in pending:  # the draft cache is cropped before compute_logits: stash into pending
            c = pending.pop("__crop")
            pending.update(crop_to=c[0], cache_len_after_crop=c[1], stored_rows_after_crop=c[2])

    try:
        with Patch((drafter, "forward", fwd), (zlab, "_raw_input_embeddings", emb), (zlab, "_crop_to", crop_wrapper),
                   (drafter, "compute_logits", logits_fn)):
            res = zlab.dflash_generate(drafter, target, torch.tensor([ids]), max_new, None, return_stats=True)
    finally:
        for h in hooks:
            h.remove()
    nl = len(drafter.layers)
    assert len(layer_outs) == nl * len(rounds)
    for r, rd in enumerate(rounds):
        b = len(rd["block_ids"])
        emb0 = F.embedding(torch.tensor(rd["block_ids"]), target.model.embed_tokens.weight)
        rd["hidden_states"] = torch.stack([emb0] + [layer_outs[r * nl + l] for l in range(nl)])
        assert rd["hidden_states"].shape == (nl + 1, b, 64)
    return rounds, res


# ----------------------------------------------------------------------------------------------
# DDTree loop, instrumented
# ----------------------------------------------------------------------------------------------


def min_gap(logits: torch.Tensor, k: int) -> float:
    lp, _ = topk_like_ddtree(logits, min(k + 1, logits.shape[-1]))
    return float((lp[:, :-1] - lp[:, 1:]).min()) if lp.shape[-1] > 1 else float("inf")


def own_build_tree(top_lp: np.ndarray, top_ids: np.ndarray, budget: int):
    """Best-first tree from per-depth sorted top-K log-probs, written from the rule in the README; also returns
    the smallest margin between the popped candidate and the best one left behind (fragility of pop order)."""
    import heapq
    depth_limit, k = top_lp.shape
    heap = [(-float(top_lp[0, 0]), (0,), 0, 1, 0, float(top_lp[0, 0]))]  # (-score, ranks, parent, depth, rank, score)
    tokens, depths, parents, margin = [], [], [-1], float("inf")
    while heap and len(tokens) < budget:
        neg, ranks, parent, depth, rank, score = heapq.heappop(heap)
        if heap:
            margin = min(margin, heap[0][0] - neg)
        node = len(tokens) + 1
        tokens.append(int(top_ids[depth - 1, rank]))
        depths.append(depth)
        parents.append(parent)
        if rank + 1 < k:
            sib = score - float(top_lp[depth - 1, rank]) + float(top_lp[depth - 1, rank + 1])
            heapq.heappush(heap, (-sib, ranks[:-1] + (rank + 1,), parent, depth, rank + 1, sib))
        if depth < depth_limit:
            child = score + float(top_lp[depth, 0])
            heapq.heappush(heap, (-child, ranks + (0,), node, depth + 1, 0, child))
    return tokens, depths, parents, margin


def wrap_drafter_forward(drafter, log):
    orig = drafter.forward

    def fwd(**kw):
        cache = kw["past_key_values"]
        log.append({"cache_len_before": cache.get_seq_length(), "context_len": int(kw["target_hidden"].shape[1]),
                    "block_len": int(kw["noise_embedding"].shape[1]),
                    "position_ids_first_last": [int(kw["position_ids"][0, 0]), int(kw["position_ids"][0, -1])],
                    "is_causal_kwarg": kw.get("is_causal", None)})
        return orig(**kw)
    return fwd


def run_ddtree(dd, drafter, target, ids: list[int], budget: int, max_new: int = MAX_NEW_TOKENS) -> dict:
    drafts, trees, compiles, walks = [], [], [], []
    o_build, o_compile, o_follow = dd.build_ddtree_tree, dd.compile_ddtree_tree, dd.follow_verified_tree

    def build(draft_logits, b):
        r = o_build(draft_logits, b)
        info = {"draft_rows": int(draft_logits.shape[0]), "min_topk_logprob_gap": None, "heap_min_margin": None}
        if b > 0:
            lp, tid = topk_like_ddtree(draft_logits, b)
            tok, dep, par, margin = own_build_tree(lp.numpy(), tid.numpy(), b)
            assert (tok, dep, par) == (r[0].tolist(), r[1].tolist(), list(r[2])), "own tree builder != reference"
            info.update(min_topk_logprob_gap=min_gap(draft_logits, b),
                        heap_min_margin=None if math.isinf(margin) else margin)
        trees.append(info)
        return r

    def compile_(**kw):
        r = o_compile(**kw)
        vi, vp, mask, past, n = r
        m = mask[0, 0, :n, past:past + n]
        compiles.append({"verify_input_ids": vi[0, :n].tolist(), "verify_position_ids": vp[0, :n].tolist(),
                         "past_length": int(past), "mask_shape": list(mask.shape),
                         "prefix_all_visible": bool((mask[0, 0, :n, :past] == 0).all()),
                         "tree_visible": (m == 0).to(torch.int64).tolist()})
        return r

    def follow(child_maps, posterior):
        acc, nxt = o_follow(child_maps, posterior)
        walks.append({"posterior": posterior[0].tolist(), "accepted_indices": list(acc), "next_token": int(nxt)})
        return acc, nxt

    with Patch((drafter, "forward", wrap_drafter_forward(drafter, drafts)), (dd, "build_ddtree_tree", build),
               (dd, "compile_ddtree_tree", compile_), (dd, "follow_verified_tree", follow)):
        res = dd.ddtree_generate(model=drafter, target=target, input_ids=torch.tensor([ids]), mask_token_id=MASK_ID,
                                 max_new_tokens=max_new, block_size=BLOCK, stop_token_ids=None,
                                 temperature=0.0, tree_budget=budget, save_tree_traces=True)
    n = len(res.acceptance_lengths)
    assert len(drafts) == len(trees) == len(compiles) == len(walks) == len(res.round_trees) == n
    rounds = []
    for r in range(n):
        tr, cp, wk, dr = res.round_trees[r], compiles[r], walks[r], drafts[r]
        parents = tr["tree"]["parents"]
        depths = [0] + tr["tree"]["node_depths"]
        # the 0/1 visibility matrix must be the ancestor relation of `parents`
        for i in range(len(parents)):
            anc, j = set(), i
            while j >= 0:
                anc.add(j)
                j = parents[j]
            assert [k for k in range(len(parents)) if cp["tree_visible"][i][k]] == sorted(anc)
        assert cp["verify_position_ids"] == [cp["past_length"] + d for d in depths] and cp["prefix_all_visible"]
        assert wk["accepted_indices"] == tr["accepted_indices"]
        acc = wk["accepted_indices"]
        rounds.append({
            "round": r,
            "start": cp["past_length"],
            "root_token": cp["verify_input_ids"][0],
            "draft": {**dr, "draft_rows": trees[r]["draft_rows"],
                      "truncated_block": dr["block_len"] != BLOCK},
            "tree": {"node_token_ids": tr["tree"]["node_token_ids"], "node_depths": tr["tree"]["node_depths"],
                     "parents": parents, "min_topk_logprob_gap": trees[r]["min_topk_logprob_gap"],
                     "heap_min_margin": trees[r]["heap_min_margin"]},
            "verify": {"input_ids": cp["verify_input_ids"], "position_ids": cp["verify_position_ids"],
                       "past_length": cp["past_length"]},
            "posterior": wk["posterior"],
            "accepted_indices": acc,
            "acceptance_length": len(acc),
            "committed_tokens": [cp["verify_input_ids"][i] for i in acc],
            "next_bonus": wk["next_token"],
        })
        assert res.acceptance_lengths[r] == len(acc)
    return {"output_ids": res.output_ids[0, len(ids):].tolist(), "acceptance_lengths": list(res.acceptance_lengths),
            "decode_rounds": n, "rounds": rounds}


def canonical_ddtree_run(dd, drafter, target, ids: list[int], budget: int) -> dict:
    """ddtree sizes its output buffer max_length + 1 + budget and slices each block off it, so for budget < 15
    the last rounds draft a SHORTER block whose logits rows start at the root's own row (a reference quirk).
    The canonical trace is taken from a run with BLOCK - 1 extra tokens of headroom (no round before the 48th
    committed token can then hit the buffer end), keeping the rounds that start before max_new_tokens; it is
    asserted equal to the literal max_new_tokens run up to that run's first shortened block."""
    literal = run_ddtree(dd, drafter, target, ids, budget, MAX_NEW_TOKENS)
    wide = run_ddtree(dd, drafter, target, ids, budget, MAX_NEW_TOKENS + BLOCK - 1)
    end = len(ids) + MAX_NEW_TOKENS
    rounds = [rd for rd in wide["rounds"] if rd["start"] < end]
    assert not any(rd["draft"]["truncated_block"] for rd in rounds)
    first_trunc = next((rd["round"] for rd in literal["rounds"] if rd["draft"]["truncated_block"]), None)
    same = literal["rounds"] if first_trunc is None else literal["rounds"][:first_trunc]
    assert rounds[:len(same)] == same, "headroom changed rounds before the first truncated block"
    if first_trunc is None:
        assert rounds == literal["rounds"]
    assert wide["output_ids"][:MAX_NEW_TOKENS] == literal["output_ids"]
    taus = [rd["acceptance_length"] for rd in rounds]
    return {"output_ids": literal["output_ids"], "acceptance_lengths": taus, "decode_rounds": len(rounds),
            "rounds": rounds,
            "literal_reference_run": {
                "max_new_tokens": MAX_NEW_TOKENS, "acceptance_lengths": literal["acceptance_lengths"],
                "first_truncated_block_round": first_trunc,
                "truncated_block_lens": [rd["draft"]["block_len"] for rd in literal["rounds"]
                                         if rd["draft"]["truncated_block"]],
                "rounds_equal_to_canonical_before_it": True}}


def run_chain(dd_chain, drafter, target, ids: list[int], block_size: int) -> dict:
    """ddtree's dflash.py: the plain DFlash chain (block_size 16) or autoregressive decoding (block_size 1)."""
    samples, drafts = [], []
    o_sample = dd_chain.sample

    def sample(logits, temperature=0.0):
        r = o_sample(logits, temperature)
        samples.append(r[0].tolist())
        return r

    patches = [(dd_chain, "sample", sample), (drafter, "forward", wrap_drafter_forward(drafter, drafts))]
    with Patch(*patches):
        res = dd_chain.dflash_generate(model=drafter, target=target, input_ids=torch.tensor([ids]),
                                       mask_token_id=MASK_ID, max_new_tokens=MAX_NEW_TOKENS, block_size=block_size,
                                       stop_token_ids=None, temperature=0.0)
    out = {"output_ids": res.output_ids[0, len(ids):].tolist(), "acceptance_lengths": list(res.acceptance_lengths),
           "decode_rounds": len(res.acceptance_lengths)}
    if block_size == 1:
        return out
    # sample() calls: prefill bonus, then per round (draft tokens [15], posterior [16]).
    first_bonus, rest = samples[0][0], samples[1:]
    assert len(rest) == 2 * out["decode_rounds"] == 2 * len(drafts)
    rounds, start, bonus = [], len(ids), first_bonus
    for r in range(out["decode_rounds"]):
        draft, post = rest[2 * r], rest[2 * r + 1]
        tau = res.acceptance_lengths[r]
        block = [bonus] + draft
        k = 0
        while k < len(draft) and draft[k] == post[k]:
            k += 1
        assert tau == k + 1
        rounds.append({
            "round": r, "start": start, "root_token": bonus,
            "draft": {**drafts[r], "draft_rows": len(draft), "truncated_block": drafts[r]["block_len"] != BLOCK},
            "tree": {"node_token_ids": draft, "node_depths": list(range(1, len(draft) + 1)),
                     "parents": [-1] + list(range(len(draft))), "min_topk_logprob_gap": None,
                     "heap_min_margin": None},
            "verify": {"input_ids": block, "position_ids": list(range(start, start + len(block))),
                       "past_length": start},
            "posterior": post, "accepted_indices": list(range(tau)), "acceptance_length": tau,
            "committed_tokens": block[:tau], "next_bonus": post[tau - 1],
        })
        start += tau
        bonus = post[tau - 1]
    out["rounds"] = rounds
    return out


def check_run_consistency(run: dict, ids: list[int], ar: list[int]) -> None:
    """Replays the recorded rounds: committed tokens + bonus reproduce the output; trees are well formed."""
    seq = list(ids)
    first = True
    for rd in run["rounds"]:
        assert rd["start"] == len(seq), (rd["start"], len(seq))
        if first:
            assert rd["root_token"] == ar[0]
            first = False
        tree = rd["tree"]
        n = len(tree["node_token_ids"])
        assert len(tree["parents"]) == n + 1 and tree["parents"][0] == -1
        for i in range(1, n + 1):
            p = tree["parents"][i]
            assert 0 <= p < i
            assert tree["node_depths"][i - 1] == (0 if p == 0 else tree["node_depths"][p - 1]) + 1
        # walk again from the posterior
        children = [dict() for _ in range(n + 1)]
        for i in range(1, n + 1):
            children[tree["parents"][i]][tree["node_token_ids"][i - 1]] = i
        cur, acc = 0, [0]
        while rd["posterior"][cur] in children[cur]:
            cur = children[cur][rd["posterior"][cur]]
            acc.append(cur)
        assert acc == rd["accepted_indices"] and rd["next_bonus"] == rd["posterior"][cur]
        seq += rd["committed_tokens"]
    assert seq[len(ids):len(ids) + MAX_NEW_TOKENS] == ar, "replayed rounds != AR greedy"


# ----------------------------------------------------------------------------------------------
# Output helpers
# ----------------------------------------------------------------------------------------------


def dump_json(obj, indent=0) -> str:
    """JSON with dicts indented and lists of scalars on one line (readable diffs, small files)."""
    pad, pad1 = " " * indent, " " * (indent + 1)
    if isinstance(obj, dict):
        if not obj:
            return "{}"
        items = [f"{pad1}{json.dumps(k)}: {dump_json(v, indent + 1)}" for k, v in obj.items()]
        return "{\n" + ",\n".join(items) + "\n" + pad + "}"
    if isinstance(obj, (list, tuple)):
        if all(not isinstance(x, (dict, list, tuple)) for x in obj):
            return json.dumps(list(obj), ensure_ascii=False, separators=(",", ":"))
        return "[\n" + ",\n".join(pad1 + dump_json(x, indent + 1) for x in obj) + "\n" + pad + "]"
    if isinstance(obj, float) and math.isinf(obj):
        return "null"
    return json.dumps(obj, ensure_ascii=False)


def versions() -> dict:
    import loguru
    return {"python": sys.version.split()[0], "torch": torch.__version__, "transformers": transformers.__version__,
            "safetensors": safetensors.__version__, "numpy": np.__version__,
            "loguru": getattr(loguru, "__version__", "?")}


SEMANTICS = {
    "noise_embedding": "target.embed_tokens(block_ids) * input_embedding_scale (absent here -> 1.0)",
    "context_projection": "hidden_norm(fc(features)); computed once per call and fed UNCHANGED to every layer "
                          "(no input_layernorm on context rows)",
    "kv_per_layer": "K = RoPE(k_norm(k_proj([ctx ; x]))) and V = v_proj([ctx ; x]) where x = input_layernorm(h) of "
                    "the block rows; Q = RoPE(q_norm(q_proj(x))) for the block rows only",
    "positions": "context row j has position cache_len_before + j; block row i has position start + i; one "
                 "position_ids vector [cache_len_before .. start + b - 1] is passed",
    "mask": "full_attention layer: no mask (every block query sees all cached context, all new context and all b "
            "block rows, non-causal). sliding_attention layer (newest z-lab, is_causal absent -> causal): query at "
            "position p sees key positions k with k <= p and p - k < sliding_window",
    "cache": "per layer, K/V rows of [new context ; block] are appended; after the call the cache is cropped to "
             "`start` (the committed length), dropping the block rows; sliding layers keep only the last "
             "sliding_window - 1 rows (transformers DynamicSlidingWindowLayer with past recording)",
    "draft_logits": "target.lm_head(drafter.norm(h)) for block rows 1..b-1 (the drafter's own final norm, not the "
                    "target's), times output_multiplier (absent -> 1), no softcap",
    "context_features": "concat over target_layer_ids [0, 1] of HF hidden_states[id + 1] (outputs of target "
                        "layers 0 and 1; never the last entry, which is post-final-norm)",
}


# ----------------------------------------------------------------------------------------------
# Main
# ----------------------------------------------------------------------------------------------


def make_drafter_expected(zlab, dd, drafter, cfg_dict, target, prompts, name) -> dict:
    out = FIX / name
    sd = {k: v for k, v in drafter.state_dict().items()}
    tensors, desc = {}, {}

    def put(key, t, what):
        t = t.detach().contiguous()
        t = t.to(torch.int64) if not t.is_floating_point() else t.to(torch.float32)
        tensors[key] = t
        desc[key] = {"shape": list(t.shape), "dtype": str(t.dtype).replace("torch.", ""), "description": what}

    put("rope.inv_freq", drafter.rotary_emb.inv_freq, "drafter RoPE inverse frequencies [head_dim/2] (theta 1e6, "
        "default rope, attention_scaling 1); rotate_half layout")
    cases_spec = [  # (prompt index, max_new_tokens of the dflash_generate run, rounds kept)
        (0, MAX_NEW_TOKENS, 1), (1, MAX_NEW_TOKENS, 1), (2, MAX_NEW_TOKENS, 1), (0, 32, None),
    ]
    cases_meta, max_err = [], 0.0
    for ci, (pi, max_new, keep) in enumerate(cases_spec):
        ids = prompts[pi]
        rounds, res = record_zlab_generate(zlab, drafter, target, ids, max_new)
        committed = ids + res.output_ids[0, len(ids):].tolist()
        all_feats = features(target, committed)  # full causal forward == decode-time features (checked below)
        kept = rounds if keep is None else rounds[:keep]
        put(f"case{ci}.prompt_ids", torch.tensor(ids), f"= qwen3-tiny-tied prompt{pi}.input_ids")
        rmeta = []
        start = len(ids)
        cached_feats = []  # every feature row handed to the drafter so far = what its cache was built from
        for r, rd in enumerate(kept):
            cached_feats.append(rd["context_features"])
            b = len(rd["block_ids"])
            n = rd["context_features"].shape[0]
            assert rd["position_ids"] == list(range(rd["cache_len_before"], start + b))
            assert rd["cache_len_before"] + n == start and rd["crop_to"] == start == rd["cache_len_after_crop"]
            err_f = float((rd["context_features"] - all_feats[start - n:start]).abs().max())
            assert err_f < 1e-4, err_f
            own = own_draft_logits(sd, cfg_dict, target.lm_head.weight, target.model.embed_tokens.weight,
                                   torch.cat(cached_feats), rd["block_ids"], start)
            err = float((own - rd["draft_logits"]).abs().max())
            max_err = max(max_err, err)
            assert err <= DRAFT_TOL, f"own drafter != reference: {err}"
            p = f"case{ci}.round{r}."
            put(p + "context_features", rd["context_features"], f"target features handed to the drafter this round "
                f"[{n}, 2*64]: concat(hidden_states[1], hidden_states[2]) of positions {start - n}..{start - 1} "
                + ("(the prompt prefill)" if r == 0 else "(the accepted nodes of the previous verify, root first)"))
            put(p + "block_ids", torch.tensor(rd["block_ids"]), f"[{b}] = [bonus, mask x {b - 1}] at positions "
                f"{start}..{start + b - 1}")
            put(p + "position_ids", torch.tensor(rd["position_ids"]), f"[{n + b}] position ids passed to the drafter "
                f"= cache_len_before ({rd['cache_len_before']}) .. start + b - 1")
            put(p + "hidden_states", rd["hidden_states"], f"[num_layers+1, {b}, 64] block rows inside the drafter: "
                "entry 0 = noise embedding, entry l = output of drafter layer l-1 (before the final norm)")
            put(p + "draft_hidden", rd["draft_hidden"], f"[{b - 1}, 64] drafter.norm(h) of block rows 1..{b - 1}")
            put(p + "draft_logits", rd["draft_logits"], f"[{b - 1}, V] = target.lm_head(draft_hidden): the reference "
                "draft logits for block rows 1..b-1 (depths 1..b-1)")
            trees = {}
            for k in TOPK_STORED:
                lp, tid = topk_like_ddtree(rd["draft_logits"], k)
                put(p + f"top{k}.logprobs", lp, f"[{b - 1}, {min(k, VOCAB)}] top-k of log_softmax(draft_logits) as "
                    "build_ddtree_tree computes it (topk of the logits, minus logsumexp), descending")
                put(p + f"top{k}.ids", tid, f"[{b - 1}, {min(k, VOCAB)}] token ids of those")
                nt, nd, par, _, _, _ = dd.build_ddtree_tree(rd["draft_logits"], k)
                trees[str(k)] = {"node_token_ids": nt.tolist(), "node_depths": nd.tolist(), "parents": list(par)}
            tau = res.acceptance_lengths[r]
            rmeta.append({
                "round": r, "start": start, "block_len": b, "context_len": n, "bonus": rd["block_ids"][0],
                "cache_len_before": rd["cache_len_before"], "cache_len_after_forward": rd["cache_len_after_forward"],
                "cache_len_after_crop": rd["cache_len_after_crop"],
                "stored_kv_rows_per_layer": {"before": rd["stored_rows_before"],
                                             "after_forward": rd["stored_rows_after_forward"],
                                             "after_crop": rd["stored_rows_after_crop"]},
                "input_embedding_scale": rd["input_embedding_scale"],
                "draft_argmax": rd["draft_logits"].argmax(-1).tolist(),
                "acceptance_length_tau": tau,
                "own_reimplementation_max_abs_err": err,
                "ddtree_trees_from_these_logits": trees,
            })
            start += tau
        assert start == len(ids) + sum(res.acceptance_lengths[:len(kept)])
        cases_meta.append({"index": ci, "prompt": f"qwen3-tiny-tied prompt{pi}", "prompt_len": len(ids),
                           "max_new_tokens_of_run": max_new, "rounds_stored": len(kept),
                           "rounds_in_run": len(rounds), "acceptance_lengths_of_run": list(res.acceptance_lengths),
                           "output_ids_of_run": res.output_ids[0, len(ids):].tolist(), "rounds": rmeta})
        print(f"  [{name}] case{ci}: prompt{pi} rounds {len(rounds)} tau {list(res.acceptance_lengths)}")
    save_file(tensors, str(out / "expected.safetensors"), metadata={"generated_by": "tools/make_dflash_fixtures.py"})
    return {"cases": cases_meta, "tensors": desc, "own_reimplementation_max_abs_err": max_err}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ddtree-repo", type=Path, required=True, help="checkout of liranringel/ddtree")
    ap.add_argument("--dflash-repo", type=Path, required=True, help="checkout of z-lab/dflash (see header)")
    args = ap.parse_args()
    for k, v in PINNED.items():
        have = {"torch": torch.__version__, "transformers": transformers.__version__}[k]
        if not have.startswith(v):
            warnings.warn(f"{k} {have} != the pinned {v}; outputs may differ from the committed fixtures")
    torch.set_num_threads(1)
    torch.set_grad_enabled(False)
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(0)
    t0 = time.time()

    zlab, dd, dd_chain, dd_model = load_references(args.ddtree_repo, args.dflash_repo)
    refs = {"z-lab/dflash": {"path_file": "dflash/model.py", "checkout_head": git_head(args.dflash_repo),
                             "indexed_commit_used": ZLAB_INDEXED_COMMIT},
            "liranringel/ddtree": {"files": ["ddtree.py", "dflash.py", "model/dflash.py", "model/utils.py"],
                                   "checkout_head": git_head(args.ddtree_repo), "commit_used": DDTREE_COMMIT}}
    target = load_target()
    prompts = prompts_from_target_fixture()
    gold = load_file(str(TARGET_DIR / "expected.safetensors"))

    # AR greedy: our own loop; must extend the committed greedy fixtures of qwen3-tiny-tied.
    ar = {}
    for pi in range(3):
        ar[pi] = greedy_ar(target, prompts[pi], TRAIN_NEW_TOKENS)
    for k, pi in enumerate([0, 1]):
        g = gold[f"greedy{k}.output_ids"].tolist()
        assert ar[pi][:len(g)] == g, "AR greedy disagrees with qwen3-tiny-tied/expected.safetensors"
    assert all(MASK_ID not in ar[pi][:MAX_NEW_TOKENS] for pi in LOOP_PROMPTS), "mask id generated (ddtree drops it)"
    print(f"target + AR greedy: {time.time() - t0:.1f}s")

    train_data = []
    for pi in range(3):
        seq = prompts[pi] + ar[pi]
        train_data.append((torch.tensor(seq), features(target, seq), len(prompts[pi])))

    loop_runs, drafter_meta = [], {}
    for name, spec in DRAFTERS.items():
        print(f"{name}: training ...")
        drafter, cfg_dict = write_drafter(zlab, target, name, spec, train_data)
        print(f"{name}: drafter fixture ...")
        exp = make_drafter_expected(zlab, dd, drafter, cfg_dict, target, prompts, name)

        # ddtree's own drafter copy (model/dflash.py) on the CPU: attention without any mask.
        dcopy = dd_model.DFlashDraftModel.from_pretrained(FIX / name, dtype=torch.float32,
                                                          attn_implementation="eager").eval()
        t = load_file(str(FIX / name / "expected.safetensors"))
        ctx = t["case0.round0.context_features"][None]
        blk = t["case0.round0.block_ids"][None]
        pos = t["case0.round0.position_ids"][None]
        h = dcopy(target_hidden=ctx, noise_embedding=target.model.embed_tokens(blk), position_ids=pos,
                  past_key_values=DynamicCache(), use_cache=True, is_causal=False)
        copy_logits = target.lm_head(h[0, 1:])
        copy_err = float((copy_logits - t["case0.round0.draft_logits"]).abs().max())
        copy_same_argmax = bool((copy_logits.argmax(-1) == t["case0.round0.draft_logits"].argmax(-1)).all())
        if not spec["sliding"]:
            assert copy_err < 1e-5, copy_err

        meta = {
            "drafter": name, "generated_by": "tools/make_dflash_fixtures.py", "versions": versions(),
            "references": refs, "target": "fixtures/qwen3-tiny-tied (eager attention, float32)", "dtype": "float32",
            "config": cfg_dict,
            "layer_semantics_newest_zlab": [{"layer": i, "layer_type": cfg_dict["layer_types"][i],
                                             "is_causal": bool(a.self_attn.is_causal),
                                             "sliding_window": a.self_attn.sliding_window}
                                            for i, a in enumerate(drafter.layers)],
            "semantics": SEMANTICS,
            "training": {"steps": spec["train_steps"], "seed": spec["seed"], "batch": 8, "context_window": 24,
                         "optimizer": "AdamW lr 3e-3 cosine to 0, no weight decay",
                         "data": "target greedy continuations (80 tokens) of qwen3-tiny-tied prompt0/1/2",
                         "init": "linears N(0, 0.1), norm weights 1 + N(0, 0.1)"},
            "ddtree_model_copy_check": {
                "what": "liranringel/ddtree model/dflash.py (its own older copy of the drafter), eager attention, "
                        "case0.round0 inputs",
                "max_abs_logit_diff": copy_err, "same_argmax": copy_same_argmax,
                "note": ("identical: full attention everywhere" if not spec["sliding"] else
                         "differs: the copy passes sliding_window only to the attention kernel; eager/sdpa ignore "
                         "it and is_causal=False, so on the CPU its layer 0 is full non-causal attention. With "
                         "flash_attention_2 (its GPU benchmark setting) the window is symmetric (|p - k| < W), "
                         "still non-causal. The newest z-lab code (used for every fixture here) is causal + window.")},
            "tolerances": {"own_reimplementation_vs_reference": DRAFT_TOL,
                           "measured": exp["own_reimplementation_max_abs_err"]},
            "cases": exp["cases"], "tensors": exp["tensors"],
        }
        (FIX / name / "expected.json").write_text(dump_json(meta) + "\n")
        drafter_meta[name] = meta

        print(f"{name}: DDTree loop ...")
        for pi in LOOP_PROMPTS:
            ids = prompts[pi]
            want = ar[pi][:MAX_NEW_TOKENS]
            for budget in BUDGETS:
                run = canonical_ddtree_run(dd, drafter, target, ids, budget)
                assert run["output_ids"] == want, (name, pi, budget)
                check_run_consistency(run, ids, want)
                if not spec["sliding"] and budget in (4, 16):  # the ddtree copy must give the same rounds
                    again = canonical_ddtree_run(dd, dcopy, target, ids, budget)
                    floats = ("min_topk_logprob_gap", "heap_min_margin")  # eager vs sdpa: ~1e-7 apart
                    for a, b in zip(again["rounds"], run["rounds"], strict=True):
                        fa, fb = ({k: x["tree"][k] for k in floats} for x in (a, b))
                        strip = [{**x, "tree": {k: v for k, v in x["tree"].items() if k not in floats}} for x in (a, b)]
                        close = all((fa[k] is None) == (fb[k] is None) and (fa[k] is None or abs(fa[k] - fb[k]) < 1e-5)
                                    for k in floats)
                        assert strip[0] == strip[1] and close, ("ddtree drafter copy disagrees", a, b)
                loop_runs.append({"drafter": name, "prompt": pi, "mode": "ddtree", "tree_budget": budget, **run})
                print(f"    prompt{pi} B={budget:2d}: rounds {run['decode_rounds']:2d} tau {run['acceptance_lengths']}")
            run = run_chain(dd_chain, drafter, target, ids, BLOCK)
            assert run["output_ids"] == want
            check_run_consistency(run, ids, want)
            loop_runs.append({"drafter": name, "prompt": pi, "mode": "dflash_chain", "tree_budget": None, **run})
            print(f"    prompt{pi} chain: rounds {run['decode_rounds']:2d} tau {run['acceptance_lengths']}")
            # z-lab newest chain (the drafter fixture's reference loop) agrees too
            zres = zlab.dflash_generate(drafter, target, torch.tensor([ids]), MAX_NEW_TOKENS, None)
            assert zres[0, len(ids):].tolist() == want

    ar_ref = {}
    for pi in LOOP_PROMPTS:  # dflash_generate needs a model only for .device when block_size == 1
        r = run_chain(dd_chain, drafter, target, prompts[pi], 1)
        assert r["output_ids"] == ar[pi][:MAX_NEW_TOKENS], "reference AR (block_size 1) != own AR"
        ar_ref[pi] = r

    for run in loop_runs:
        taus = run["acceptance_lengths"]
        run["mean_acceptance_length"] = round(sum(taus) / len(taus), 4)
    rounds_doc = {
        "generated_by": "tools/make_dflash_fixtures.py", "versions": versions(), "references": refs,
        "target": "fixtures/qwen3-tiny-tied (float32, eager attention; the verify mask is the 4-D float mask "
                  "ddtree builds: 0 visible, finfo(float32).min hidden)",
        "drafters": list(DRAFTERS), "block_size": BLOCK, "mask_token_id": MASK_ID, "max_new_tokens": MAX_NEW_TOKENS,
        "temperature": 0.0, "stop_token_ids": None,
        "prompts": [{"index": pi, "source": f"qwen3-tiny-tied expected.safetensors prompt{pi}.input_ids",
                     "input_ids": prompts[pi]} for pi in LOOP_PROMPTS],
        "ar_greedy": [{"prompt": pi, "output_ids": ar[pi][:MAX_NEW_TOKENS],
                       "note": "own KV-cache argmax loop == ddtree dflash_generate(block_size=1) == every run below; "
                               "first 32 tokens == qwen3-tiny-tied greedy{0,1}.output_ids"} for pi in LOOP_PROMPTS],
        "schema": ROUNDS_SCHEMA,
        "runs": loop_runs,
    }
    LOOP_DIR.mkdir(exist_ok=True)
    (LOOP_DIR / "rounds.json").write_text(dump_json(rounds_doc) + "\n")

    print("acceptance (mean tau):")
    for run in loop_runs:
        print(f"  {run['drafter']:20s} prompt{run['prompt']} {run['mode']:12s} B={run['tree_budget']}: "
              f"{run['mean_acceptance_length']:.3f} over {run['decode_rounds']} rounds")
    total = sum(f.stat().st_size for d in [*(FIX / n for n in DRAFTERS), LOOP_DIR] for f in d.iterdir())
    print(f"total size of the new fixture files: {total / 1e6:.2f} MB; {time.time() - t0:.0f}s")


ROUNDS_SCHEMA = {
    "runs[]": "one generation: drafter (fixture folder), prompt (index into prompts), mode ('ddtree' = "
              "ddtree_generate with tree_budget; 'dflash_chain' = ddtree's dflash_generate with block_size 16), "
              "output_ids (the 48 new tokens), acceptance_lengths (tau per round), decode_rounds, "
              "mean_acceptance_length; ddtree runs also have literal_reference_run: the reference called with "
              "max_new_tokens 48 shrinks its block near the end when B < 15 (its output buffer is max_length + 1 "
              "+ B long), drafting a shorter block whose logit rows then START AT THE ROOT's row; `rounds` is the "
              "canonical trace (full 16-token blocks, from a run with 15 tokens of headroom, same output), equal to "
              "the literal run up to literal_reference_run.first_truncated_block_round (asserted)",
    "runs[].rounds[]": {
        "round": "0-based",
        "start": "committed length before the round (= target cache length = position of root_token)",
        "root_token": "the bonus token from the previous round (the prefill argmax in round 0); tree node 0",
        "draft": "the drafter call: cache_len_before (draft cache length = previous start), context_len (features "
                 "handed in: the whole prompt in round 0, else the previous round's accepted nodes), block_len, "
                 "position_ids_first_last (the position ids passed: cache_len_before .. start + 15), draft_rows "
                 "(rows of draft logits fed to the tree builder = its depth limit, 15), truncated_block (always "
                 "false in the canonical trace), is_causal_kwarg (what ddtree passes; the newest z-lab drafter "
                 "ignores it: its masks come from the layer types)",
        "tree": "node_token_ids [B'] and node_depths [B'] of nodes 1..B' in pop order (root excluded), parents "
                "[B'+1] (parents[0] = -1); B' = B except when the heap runs dry (never here); "
                "min_topk_logprob_gap: smallest gap between adjacent sorted top-(B+1) draft log-probs over all "
                "depths; heap_min_margin: smallest score gap between a popped candidate and the best one left on "
                "the heap (both small = an f32 re-implementation may order nodes differently); chain mode: the "
                "15 argmax draft tokens as a chain (gaps null)",
        "verify": "input_ids [B'+1] = [root, nodes...], position_ids = start + depth, past_length = start; mask: "
                  "whole prefix visible + ancestors-and-self inside the tree (asserted)",
        "posterior": "[B'+1] argmax of the target logits at every verified node (node order)",
        "accepted_indices": "the walk: from the root, follow the child whose token equals the posterior of the "
                            "current node; node ids, root first",
        "acceptance_length": "tau = len(accepted_indices) (counts the root)",
        "committed_tokens": "tokens of the accepted nodes (written at start..start+tau-1)",
        "next_bonus": "posterior at the last accepted node = next round's root_token",
    },
}


if __name__ == "__main__":
    main()
