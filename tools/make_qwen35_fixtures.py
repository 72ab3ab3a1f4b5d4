#!/usr/bin/env python3
"""Golden fixtures for the hybrid Qwen3.5/3.6 target (Gated DeltaNet + gated attention) and a DFlash drafter for it.

What it makes (deterministic: fixed seeds; uses `fixtures/tokenizer/` made by tools/make_qwen3_fixtures.py):

* `fixtures/qwen35-tiny/`: a random float32 `qwen3_5` model, 4 layers (`full_attention_interval` 4: three Gated
  DeltaNet layers then one gated attention layer), tied embeddings, saved in the multimodal layout of the released
  checkpoints: `config.json` is a `Qwen3_5Config` (`model_type` qwen3_5, the text model under `text_config`, a tiny
  `vision_config`) and the tensors are named `model.language_model.*`, plus a dummy `model.visual.*` tensor and two
  `mtp.*` tensors that loaders must ignore (transformers does).
* `fixtures/qwen35-small-untied/`: 8 layers (attention at 3 and 7), untied LM head, `Qwen3_5ForCausalLM.save_pretrained`
  (`model_type` qwen3_5_text, names `model.*`), sharded into 3 files; one value head per key head and Dk != Dv.
* `fixtures/qwen3next-tiny/`: a dense `qwen3_next` model (no experts), 4 layers, whose GDN projections are stored fused
  and grouped per key head (`in_proj_qkvz`, `in_proj_ba`).
* `fixtures/dflash-qwen35-tiny/`: a DFlash drafter for `qwen35-tiny` in the z-lab checkpoint format (config keys and
  tensor names as `fixtures/dflash-tiny/`), target_layer_ids [1, 2], trained briefly on the target's own greedy
  continuations so drafts are partly right (rounds accept more than one token).

Per target, `expected.safetensors` + `expected.json` (every tensor described there), all from transformers in float32
on the CPU with its PyTorch reference paths of the causal conv and the gated delta rule (chunked form for multi-token
forwards, recurrent form for cached single-token decode):
prompt logits / hidden states (plain, chat, long), cached decode logits, per-node logits of random trees (transformers
has no tree mask for recurrent layers, so row n is a plain forward over prefix + the root..n path), greedy
continuations, a chat request's greedy answer with its text, and the drafter's first draft logits.

Run (from the repository root; about a minute on 2 CPU cores, no network):

    /work/pyenv/bin/python tools/make_qwen35_fixtures.py

Versions it was run with: Python 3.11, torch 2.11.0 (CPU), transformers 5.17.0, tokenizers 0.23.3, safetensors 0.8.0,
numpy 2.4.6. Helpers (tokenizer ids, prompts, tree shapes) are imported from tools/make_qwen3_fixtures.py, and the
drafter forward used for training is this repository's own `own_draft_logits` from tools/make_dflash_fixtures.py
(checked there against the z-lab reference); no reference code is copied or needed here.
"""

from __future__ import annotations

import contextlib
import copy
import importlib
import importlib.util
import json
import math
import shutil
import sys
import warnings
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
import transformers
from safetensors.torch import load_file, save_file
from transformers import (AutoModelForCausalLM, AutoTokenizer, GenerationConfig, Qwen3_5Config, Qwen3_5ForCausalLM,
                          Qwen3_5TextConfig, Qwen3NextConfig, Qwen3NextForCausalLM)

ROOT = Path(__file__).resolve().parent.parent
FIX = ROOT / "fixtures"
TOK_DIR = FIX / "tokenizer"


def _load_tool(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


Q3 = _load_tool("make_qwen3_fixtures")  # tokenizer ids, prompts, tree shapes, versions
DF = _load_tool("make_dflash_fixtures")  # own_draft_logits, drafter_config

PINNED = {"torch": "2.11.0", "transformers": "5.17.0"}
GREEDY_NEW_TOKENS = 32
CHAT_NEW_TOKENS = 48
DECODE_STEPS = 8
TREE_TOL = 1e-5
SMOKE_MESSAGES = [{"role": "user", "content": "Sort a list of numbers in Python."}]

ROPE = {"rope_type": "default", "rope_theta": 1e7, "mrope_section": [2, 1, 1], "mrope_interleaved": True}
MODELS = {
    "qwen35-tiny": dict(
        kind="qwen3_5", seed=3501, layout="multimodal", shard=None,
        config=dict(
            vocab_size=Q3.VOCAB_SIZE, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
            num_attention_heads=4, num_key_value_heads=2, head_dim=32, linear_num_key_heads=2,
            linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=16, linear_conv_kernel_dim=4,
            full_attention_interval=4, tie_word_embeddings=True, max_position_embeddings=512,
            rope_parameters=dict(ROPE, partial_rotary_factor=0.25),  # rotary dim 8 of 32, as 64 of 256
        ),
    ),
    "qwen35-small-untied": dict(
        kind="qwen3_5", seed=3502, layout="text", shard="450KB",
        config=dict(
            vocab_size=Q3.VOCAB_SIZE, hidden_size=48, intermediate_size=96, num_hidden_layers=8,
            num_attention_heads=4, num_key_value_heads=1, head_dim=16, linear_num_key_heads=2,
            linear_num_value_heads=2, linear_key_head_dim=32, linear_value_head_dim=16, linear_conv_kernel_dim=4,
            full_attention_interval=4, tie_word_embeddings=False, max_position_embeddings=512,
            rope_parameters=dict(ROPE, partial_rotary_factor=0.5),
        ),
    ),
    "qwen3next-tiny": dict(
        kind="qwen3_next", seed=3503, layout="text", shard=None,
        config=dict(
            vocab_size=Q3.VOCAB_SIZE, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
            num_attention_heads=4, num_key_value_heads=2, head_dim=16, linear_num_key_heads=2,
            linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=16, linear_conv_kernel_dim=4,
            full_attention_interval=4, tie_word_embeddings=False, max_position_embeddings=512, num_experts=0,
            rope_parameters={"rope_type": "default", "rope_theta": 5e6, "partial_rotary_factor": 0.25},
        ),
    ),
}

DRAFTER = "dflash-qwen35-tiny"
DRAFTER_TARGET = "qwen35-tiny"
DRAFT_LAYER_IDS = [1, 2]
DRAFT_BLOCK = 16
DRAFT_STEPS = 300
TRAIN_NEW_TOKENS = 80


# ----------------------------------------------------------------------------------------------
# Targets
# ----------------------------------------------------------------------------------------------


def build_model(name: str):
    spec = MODELS[name]
    common = dict(bos_token_id=Q3.token_id("<|endoftext|>"), eos_token_id=Q3.token_id("<|im_end|>"),
                  pad_token_id=Q3.token_id("<|endoftext|>"), hidden_act="silu", attention_bias=False,
                  rms_norm_eps=1e-6, dtype="float32")
    if spec["kind"] == "qwen3_5":
        cfg = Qwen3_5TextConfig(**spec["config"], **common)
        cls = Qwen3_5ForCausalLM
    else:
        cfg = Qwen3NextConfig(**spec["config"], **common)
        cls = Qwen3NextForCausalLM
    torch.manual_seed(spec["seed"])
    model = cls(cfg).to(torch.float32)
    gen = torch.Generator().manual_seed(spec["seed"])
    with torch.no_grad():
        for pname, p in sorted(model.named_parameters(), key=lambda kv: kv[0]):
            rnd = torch.randn(p.shape, generator=gen)
            if pname.endswith("linear_attn.norm.weight"):  # gated norm: plain weight
                p.copy_(1.0 + 0.1 * rnd)
            elif pname.endswith("norm.weight"):  # zero-centred norms: (1 + w)
                p.copy_(0.1 * rnd)
            elif pname.endswith("A_log"):  # decay rates exp(A_log) in [0.1, 4]: some memory, some forgetting
                p.copy_(torch.empty(p.shape).uniform_(math.log(0.1), math.log(4.0), generator=gen))
            elif pname.endswith("dt_bias"):
                p.copy_(0.5 * rnd)
            elif pname.endswith("conv1d.weight"):
                p.copy_(0.4 * rnd)
            elif "embed_tokens" in pname:
                p.copy_((0.2 if cfg.tie_word_embeddings else 0.1) * rnd)
            elif "lm_head" in pname:
                p.copy_(0.3 * rnd)
            else:
                p.copy_(0.12 * rnd)
    model.set_attn_implementation("eager")
    return model.eval()


def save_model(model, name: str) -> Path:
    spec, out = MODELS[name], FIX / name
    if out.exists():
        shutil.rmtree(out)
    model.generation_config = Q3.generation_config()
    if spec["layout"] == "multimodal":
        out.mkdir(parents=True)
        text = model.config
        outer = Qwen3_5Config(
            text_config=text.to_dict(), tie_word_embeddings=text.tie_word_embeddings,
            vision_config=dict(depth=1, hidden_size=16, intermediate_size=32, num_heads=2, out_hidden_size=64),
        )
        outer.architectures = ["Qwen3_5ForConditionalGeneration"]
        outer.save_pretrained(out)
        model.generation_config.save_pretrained(out)
        tensors = {}
        for k, v in model.state_dict().items():
            if k == "lm_head.weight" and text.tie_word_embeddings:
                continue
            tensors["model.language_model." + k[len("model."):] if k.startswith("model.") else k] = v.contiguous()
        gen = torch.Generator().manual_seed(spec["seed"] + 1)
        tensors["model.visual.patch_embed.proj.weight"] = torch.randn(16, 3, 2, 4, 4, generator=gen)
        tensors["mtp.fc.weight"] = torch.randn(64, 128, generator=gen)
        tensors["mtp.norm.weight"] = torch.randn(64, generator=gen)
        save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    else:
        kwargs = {"max_shard_size": spec["shard"]} if spec["shard"] else {}
        model.save_pretrained(out, **kwargs)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(TOK_DIR / f, out / f)
    return out


class _Float64Torch:
    """`torch` as the modeling modules see it during a float64 run: `torch.float32` means float64."""

    def __getattr__(self, name):
        return torch.float64 if name == "float32" else getattr(torch, name)


@contextlib.contextmanager
def true_float64():
    """transformers computes the norms, the gates and the delta rule in float32 even in a float64 model (it
    casts with `.float()` / `.to(torch.float32)`); this keeps float64 tensors float64 for the duration, so the
    result is a float64 reference. The rotary angles stay float32 (the inv_freq buffer is kept float32), as in
    the float32 model and in our rotary table."""
    mods = [importlib.import_module(f"transformers.models.{m}.modeling_{m}") for m in ("qwen3_5", "qwen3_next")]
    orig_float, saved = torch.Tensor.float, [(m, m.torch) for m in mods]
    torch.Tensor.float = lambda self, *a, **k: self if self.dtype == torch.float64 else orig_float(self, *a, **k)
    for m in mods:
        m.torch = _Float64Torch()
    try:
        yield
    finally:
        torch.Tensor.float = orig_float
        for m, t in saved:
            m.torch = t


def float64_copy(model):
    m = copy.deepcopy(model).double()
    m.model.rotary_emb.inv_freq = model.model.rotary_emb.inv_freq.clone()
    return m


def forward_full(model, ids: list[int]):
    """Plain forward over `ids` (no cache). Returns (logits [T,V], hidden [L+1,T,H], pre-norm last layer)."""
    captured = {}
    hook = model.model.layers[-1].register_forward_hook(lambda m, a, o: captured.__setitem__("h", o))
    try:
        out = model(torch.tensor([ids]), use_cache=False, output_hidden_states=True)
    finally:
        hook.remove()
    last = captured["h"][0] if not isinstance(captured["h"], tuple) else captured["h"][0][0]
    return out.logits[0], torch.stack([h[0] for h in out.hidden_states]), last


def cached_decode(model, ids: list[int], prefix_len: int):
    """Prefill ids[:prefix_len] into the model's cache, then feed the rest one token at a time."""
    out = model(torch.tensor([ids[:prefix_len]]), use_cache=True)
    cache, rows = out.past_key_values, []
    for t in ids[prefix_len:]:
        out = model(torch.tensor([[t]]), past_key_values=cache, use_cache=True)
        cache = out.past_key_values
        rows.append(out.logits[0, -1])
    return torch.stack(rows)


def greedy(model, ids: list[int], steps: int, eos: list[int] | None):
    """transformers' generate (cached), checked against an argmax loop of full re-forwards."""
    saved = model.generation_config
    model.generation_config = GenerationConfig(pad_token_id=Q3.token_id("<|endoftext|>"), eos_token_id=eos)
    try:
        out = model.generate(torch.tensor([ids]), do_sample=False, max_new_tokens=steps,
                             attention_mask=torch.ones(1, len(ids), dtype=torch.long))
    finally:
        model.generation_config = saved
    new = out[0, len(ids):].tolist()
    seq, gaps = list(ids), []
    for _ in range(len(new)):
        logits = model(torch.tensor([seq]), use_cache=False).logits[0, -1]
        top = torch.topk(logits, 2)
        gaps.append(float(top.values[0] - top.values[1]))
        seq.append(int(top.indices[0]))
    assert seq[len(ids):] == new, (seq[len(ids):], new)
    return new, gaps


def make_expected(model, hf_tok, name: str):
    cfg = model.config
    tensors, desc = {}, {}

    def put(key, t, what):
        t = t.detach().contiguous()
        t = t.to(torch.int64) if not t.is_floating_point() else t.to(torch.float32)
        tensors[key], desc[key] = t, {"shape": list(t.shape), "dtype": str(t.dtype).replace("torch.", ""),
                                      "description": what}

    put("rope.inv_freq", model.model.rotary_emb.inv_freq, "RoPE inverse frequencies [rotary_dim/2]")
    chat = hf_tok.apply_chat_template(Q3.CHAT_PROMPT_MESSAGES, tokenize=False, add_generation_prompt=True)
    model64 = float64_copy(model)  # the float32 reference's own rounding is ~1e-5 (see expected.json)
    f32_vs_f64 = []
    prompt_ids = []
    for i, (kind, text) in enumerate([("plain", Q3.PLAIN_PROMPT), ("chat", chat), ("long", Q3.LONG_PROMPT)]):
        ids = hf_tok(text, add_special_tokens=False)["input_ids"]
        prompt_ids.append(ids)
        logits, hs, last = forward_full(model, ids)
        assert torch.equal(hs[-1], model.model.norm(last)), "hidden_states[-1] is the final-norm output"
        put(f"prompt{i}.input_ids", torch.tensor(ids), f"token ids of the {kind} prompt [T={len(ids)}]")
        put(f"prompt{i}.logits", logits, "logits of a full forward, no cache (chunked delta rule) [T, V]")
        put(f"prompt{i}.hidden_states", hs, "output_hidden_states [L+1, T, H]: entry 0 = embeddings, entry k "
            "(1<=k<L) = output of layer k-1, entry L = FINAL-NORM output (not the raw last layer)")
        put(f"prompt{i}.final_hidden", hs[-1].clone(), "final-norm output [T, H]")
        with true_float64():
            logits64 = model64(torch.tensor([ids]), use_cache=False).logits[0]
        assert logits64.dtype == torch.float64
        f32_vs_f64.append(float((logits.double() - logits64).abs().max() / logits64.abs().max()))
        put(f"prompt{i}.logits_f64", logits64, "the same forward by transformers in float64 throughout (see "
            "true_float64; rotary angles float32), stored rounded to float32 [T, V]")
        put(f"prompt{i}.last_layer_prenorm", last, "raw output of the last decoder layer [T, H]")

    ids = prompt_ids[2]
    p = len(ids) - DECODE_STEPS
    dec = cached_decode(model, ids, p)
    full = tensors["prompt2.logits"][p:]
    err = float((dec - full).abs().max())
    rel = err / float(full.abs().max())
    assert err < 1e-4, err
    put("decode.logits", dec, f"prompt2: prefill of the first {p} tokens into transformers' cache, then "
        f"{DECODE_STEPS} cached one-token steps (recurrent delta rule, conv update); row i = logits after token p+i "
        "[DECODE_STEPS, V]")
    put("decode.prefix_len", torch.tensor([p]), "tokens prefilled before the decode steps")

    rng = np.random.default_rng(35)
    tree_meta = []
    for j, (kind, n, src, plen) in enumerate([("chain", 8, 0, len(prompt_ids[0])), ("bushy", 18, 2, 70),
                                              ("random", 24, 1, len(prompt_ids[1])), ("root_only", 1, 0, 5)]):
        prefix = prompt_ids[src][:plen]
        tokens, parents, depths = Q3.random_tree(kind, n, rng, Q3.BPE_SIZE)
        rows = []
        for i in range(n):
            seq = prefix + [tokens[a] for a in Q3.ancestors(parents, i)]
            rows.append(model(torch.tensor([seq]), use_cache=False).logits[0, -1])
        put(f"tree{j}.prefix_ids", torch.tensor(prefix), f"committed prefix [P={len(prefix)}]")
        put(f"tree{j}.tree_ids", torch.tensor(tokens), f"tree tokens [N={n}], node 0 = root")
        put(f"tree{j}.parents", torch.tensor(parents), "parent node index [N]; -1 for the root")
        put(f"tree{j}.depths", torch.tensor(depths), "depth [N]; root 0")
        put(f"tree{j}.path_logits", torch.stack(rows), "row n = last-position logits of a plain forward (no cache) "
            "over prefix + the ancestor path root..n [N, V] (what tree verify must give node n)")
        tree_meta.append({"index": j, "kind": kind, "prefix_len": len(prefix), "num_nodes": n,
                          "max_depth": max(depths)})

    greedy_meta = []
    for k, src in enumerate([0, 1]):
        new, gaps = greedy(model, prompt_ids[src], GREEDY_NEW_TOKENS, None)
        put(f"greedy{k}.prompt_ids", torch.tensor(prompt_ids[src]), f"= prompt{src}.input_ids")
        put(f"greedy{k}.output_ids", torch.tensor(new), f"{GREEDY_NEW_TOKENS} greedy tokens of generate(), eos off")
        greedy_meta.append({"index": k, "prompt_source": f"prompt{src}", "min_top1_top2_logit_gap": min(gaps)})

    eos = [Q3.token_id("<|im_end|>"), Q3.token_id("<|endoftext|>")]
    chat_ids = hf_tok.apply_chat_template(SMOKE_MESSAGES, tokenize=True, add_generation_prompt=True,
                                          return_dict=False)
    new, gaps = greedy(model, chat_ids, CHAT_NEW_TOKENS, eos)
    text = hf_tok.decode(new, skip_special_tokens=True)
    put("chat.prompt_ids", torch.tensor(chat_ids), "apply_chat_template(SMOKE_MESSAGES, add_generation_prompt=True)")
    put("chat.output_ids", torch.tensor(new), f"greedy answer, generate(max_new_tokens={CHAT_NEW_TOKENS}) with eos "
        f"{eos}: stops after the first eos (included) if one comes")
    meta = {
        "model": name, "generated_by": "tools/make_qwen35_fixtures.py", "versions": Q3.versions(),
        "dtype": "float32", "attn_implementation": "eager", "config": json.loads(cfg.to_json_string()),
        "trees": tree_meta, "greedy": greedy_meta,
        "decode": {"max_abs_err_vs_full_forward": err, "relative_err_vs_full_forward": rel},
        "chat": {"messages": SMOKE_MESSAGES, "output_text": text, "stopped_at_eos": bool(new and new[-1] in eos),
                 "min_top1_top2_logit_gap": min(gaps)},
        "float32_reference_vs_float64_relative_error": f32_vs_f64,
        "tolerances": {"f32_suggested_relative": 1e-4},
        "tensors": desc,
    }
    return tensors, meta, prompt_ids


def write_expected(out: Path, tensors: dict, meta: dict) -> None:
    save_file(tensors, str(out / "expected.safetensors"), metadata={"generated_by": "tools/make_qwen35_fixtures.py"})
    (out / "expected.json").write_text(json.dumps(meta, indent=2, ensure_ascii=False) + "\n")


def reload_check(out: Path, ref_model, tensors: dict) -> None:
    """Reload with from_pretrained (multimodal names, ignored visual/mtp tensors) and re-check logits."""
    m = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32, attn_implementation="eager").eval()
    ref_sd, sd = ref_model.state_dict(), m.state_dict()
    assert ref_sd.keys() == sd.keys()
    assert all(torch.equal(ref_sd[k], sd[k]) for k in ref_sd)
    ids = tensors["prompt2.input_ids"].tolist()
    err = float((m(torch.tensor([ids]), use_cache=False).logits[0] - tensors["prompt2.logits"]).abs().max())
    assert err < 1e-5, err
    print(f"  reload {out.name}: {type(m).__name__}, parameters identical, logits max err {err:.1e}")


# ----------------------------------------------------------------------------------------------
# Drafter
# ----------------------------------------------------------------------------------------------


def features(model, ids: list[int]) -> torch.Tensor:
    hs = model(torch.tensor([ids]), use_cache=False, output_hidden_states=True).hidden_states
    assert max(DRAFT_LAYER_IDS) + 1 < len(hs) - 1, "ids must avoid the last entry (final-norm output)"
    return torch.cat([hs[i + 1] for i in DRAFT_LAYER_IDS], -1)[0]


def make_drafter(target, prompts: list[list[int]]) -> tuple[dict, dict]:
    cfg = DF.drafter_config(False)
    cfg.update(dflash_config={"mask_token_id": Q3.token_id("<|mask|>"), "target_layer_ids": DRAFT_LAYER_IDS},
               num_target_layers=target.config.num_hidden_layers, block_size=DRAFT_BLOCK)
    H, nh, nkv, hd, inter = (cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"],
                             cfg["head_dim"], cfg["intermediate_size"])
    assert H == target.config.hidden_size
    shapes = {"fc.weight": (H, len(DRAFT_LAYER_IDS) * H), "hidden_norm.weight": (H,), "norm.weight": (H,)}
    for li in range(cfg["num_hidden_layers"]):
        p = f"layers.{li}."
        shapes.update({p + "input_layernorm.weight": (H,), p + "post_attention_layernorm.weight": (H,),
                       p + "self_attn.q_proj.weight": (nh * hd, H), p + "self_attn.k_proj.weight": (nkv * hd, H),
                       p + "self_attn.v_proj.weight": (nkv * hd, H), p + "self_attn.o_proj.weight": (H, nh * hd),
                       p + "self_attn.q_norm.weight": (hd,), p + "self_attn.k_norm.weight": (hd,),
                       p + "mlp.gate_proj.weight": (inter, H), p + "mlp.up_proj.weight": (inter, H),
                       p + "mlp.down_proj.weight": (H, inter)})
    gen = torch.Generator().manual_seed(3599)
    sd = {}
    for k, shape in sorted(shapes.items()):
        rnd = torch.randn(shape, generator=gen)
        sd[k] = torch.nn.Parameter(1.0 + 0.1 * rnd if k.endswith("norm.weight") else 0.1 * rnd)
    emb, head = target.model.embed_tokens.weight.detach(), target.lm_head.weight.detach()
    data = []
    for ids in prompts:
        seq = ids + greedy(target, ids, TRAIN_NEW_TOKENS, None)[0]
        data.append((seq, features(target, seq).detach(), len(ids)))
    mask = Q3.token_id("<|mask|>")
    opt = torch.optim.AdamW(sd.values(), lr=3e-3, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda i: 0.5 * (1 + math.cos(math.pi * i / DRAFT_STEPS)))
    wts = torch.exp(-torch.arange(DRAFT_BLOCK - 1, dtype=torch.float32) / 7.0)
    with torch.enable_grad():
        for step in range(DRAFT_STEPS):
            loss = 0.0
            for _ in range(8):
                seq, ft, plen = data[int(torch.randint(0, len(data), (1,), generator=gen))]
                s = int(torch.randint(plen - 1, len(seq) - DRAFT_BLOCK, (1,), generator=gen))
                block = [seq[s]] + [mask] * (DRAFT_BLOCK - 1)
                logits = DF.own_draft_logits(sd, cfg, head, emb, ft[:s], block, s)
                ce = F.cross_entropy(logits, torch.tensor(seq[s + 1:s + DRAFT_BLOCK]), reduction="none")
                loss = loss + (ce * wts).sum() / wts.sum() / 8
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            if step % 100 == 0 or step == DRAFT_STEPS - 1:
                print(f"    drafter step {step:3d} loss {loss.item():.3f}")
    return cfg, {k: v.detach().contiguous() for k, v in sd.items()}


def write_drafter(target, prompt_ids: list[list[int]], chat_ids: list[int]) -> None:
    out = FIX / DRAFTER
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    cfg, sd = make_drafter(target, prompt_ids + [chat_ids])
    (out / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    save_file(sd, str(out / "model.safetensors"), metadata={"format": "pt"})
    # The first draft after prefilling the chat request: what the Rust drafter must reproduce.
    ft = features(target, chat_ids)
    bonus = int(target(torch.tensor([chat_ids]), use_cache=False).logits[0, -1].argmax())
    block = [bonus] + [Q3.token_id("<|mask|>")] * (DRAFT_BLOCK - 1)
    with torch.no_grad():
        logits = DF.own_draft_logits(sd, cfg, target.lm_head.weight, target.model.embed_tokens.weight, ft, block,
                                     len(chat_ids))
    tensors = {"draft0.prompt_ids": torch.tensor(chat_ids), "draft0.bonus": torch.tensor([bonus]),
               "draft0.logits": logits.contiguous()}
    save_file(tensors, str(out / "expected.safetensors"), metadata={"generated_by": "tools/make_qwen35_fixtures.py"})
    meta = {"generated_by": "tools/make_qwen35_fixtures.py", "target": DRAFTER_TARGET, "versions": Q3.versions(),
            "training": {"steps": DRAFT_STEPS, "batch": 8, "lr": 3e-3, "data": "the target's 80-token greedy "
                         "continuations of its prompt0..2 and chat.prompt_ids", "forward": "own_draft_logits "
                         "(tools/make_dflash_fixtures.py): context = all committed features"},
            "tensors": {"draft0.prompt_ids": "= qwen35-tiny chat.prompt_ids", "draft0.bonus": "the target's greedy "
                        "first token after the prompt", "draft0.logits": "[block-1, V] draft logits of the block "
                        "[bonus, mask x 15] with the prompt's features (layers 1, 2) as context"}}
    (out / "expected.json").write_text(json.dumps(meta, indent=2) + "\n")


def main() -> None:
    for k, v in PINNED.items():
        have = {"torch": torch.__version__, "transformers": transformers.__version__}[k]
        if not have.startswith(v):
            warnings.warn(f"{k} {have} != the pinned {v}; outputs may differ from the committed fixtures")
    torch.set_grad_enabled(False)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    hf_tok = AutoTokenizer.from_pretrained(TOK_DIR)
    for name in MODELS:
        print(f"{name} ...")
        model = build_model(name)
        out = save_model(model, name)
        tensors, meta, prompt_ids = make_expected(model, hf_tok, name)
        write_expected(out, tensors, meta)
        reload_check(out, model, tensors)
        if name == DRAFTER_TARGET:
            print(f"{DRAFTER} ...")
            write_drafter(model, prompt_ids, tensors["chat.prompt_ids"].tolist())
    print("done")


if __name__ == "__main__":
    sys.exit(main())
