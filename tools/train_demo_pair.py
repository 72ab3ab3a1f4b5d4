#!/usr/bin/env python3
"""Trains the demo pair: a small Qwen3 target and a DFlash drafter for it, on Python source code.

What it makes (under `--out`, default `models/demo/`):

* `target/`: a byte-level BPE tokenizer (8192 ids: 8186 BPE tokens, then `<|endoftext|>`,
  `<|im_start|>`, `<|im_end|>`, `<think>`, `</think>`, `<|mask|>`) built exactly like
  `tools/make_qwen3_fixtures.py` builds `fixtures/tokenizer/` (Qwen2 layout, Qwen3-style chat
  template), trained on the Python standard library's and site-packages' `.py` files of the machine
  it runs on; and a Qwen3ForCausalLM (8 layers, hidden 256, 4 heads / 2 kv heads, head_dim 64,
  intermediate 768, tied embeddings, RoPE θ 1e6) trained as a causal LM on the same files, saved with
  `save_pretrained` in bfloat16 (`config.json`, `generation_config.json`, `model.safetensors`,
  `tokenizer.json`, `tokenizer_config.json`).
* `draft/`: a DFlash drafter (z-lab `DFlashDraftModel` format: `config.json` with `dflash_config`,
  `model.safetensors` with `fc`, `hidden_norm`, `layers.N.*`, `norm`; no embeddings, no LM head;
  bfloat16), 3 non-causal layers of the target's width, block 16, context features = outputs of
  target layers [1, 4, 6] (HF `hidden_states[2]`, `[5]`, `[7]`), trained by the DFlash block-diffusion
  recipe: target frozen; data = the target's own greedy continuations of corpus prompts; blocks of
  16 = [true token at a random anchor, mask × 15] that see the context features of positions before
  the anchor; cross-entropy on the 15 masked rows weighted by exp(-(k-1)/7) for depth k.
* `eval_prompts.json`: 16 code prefixes from held-out files (never trained on): files whose
  sha1(relative path) % 40 == 0 are held out of every phase; each prompt is the 6 lines before a
  `def` in the middle of such a file plus the `def` line and 2 more (120-700 chars, <= 200 tokens).
* `train_log.txt`: losses.

The drafter module below is written from the semantics documented in
`fixtures/dflash-tiny/README.md` ("What the reference drafter computes") and
`crates/ddtree-dflash/src/dflash.rs`: `c = hidden_norm(fc(features))` goes to every layer unchanged;
queries from the block rows, keys/values from `[c ; block]` with q/k RMSNorm and RoPE (context row j at
position j, block row i at anchor + i); full (non-causal) attention; `norm` then the target's LM head.

Run on the GPU machine (one H200; 340 s: ~22 s corpus + tokenizer, 170 s target, ~20 s greedy data,
120 s drafter), from the repository root; the committed pair was made by exactly this command (then
`target/`, `draft/` and `eval_prompts.json` copied to `models/demo/`, the log to
`tools/train_demo_pair.log`):

    PYTHONUNBUFFERED=1 python3 tools/train_demo_pair.py --out /tmp/pair \
        --total-seconds 480 --target-seconds 170 --draft-seconds 120

and a quick CPU smoke run of the whole pipeline with tiny sizes (a minute):

    /work/pyenv/bin/python tools/train_demo_pair.py --tiny --out /tmp/demo_tiny

Versions: Python 3.12, torch 2.11.0 (CUDA 13), transformers 5.17.0, tokenizers 0.23.x, safetensors
0.8.0 (the GPU machine's). Seeded, but not bit-reproducible (GPU kernels, wall-clock phase budgets,
and a corpus that depends on the installed packages).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import random
import shutil
import sys
import sysconfig
import time
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F
import tokenizers
import transformers
from safetensors.torch import save_file
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import AutoTokenizer, GenerationConfig, Qwen3Config, Qwen3ForCausalLM

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
from make_qwen3_fixtures import CHAT_TEMPLATE, QWEN2_SPLIT_REGEX, SPECIAL_TOKENS  # noqa: E402

T0 = time.time()
LOG = None


def log(*a):
    s = f"[{time.time() - T0:7.1f}s] " + " ".join(str(x) for x in a)
    print(s, flush=True)
    if LOG is not None:
        LOG.write(s + "\n")
        LOG.flush()


# ----------------------------------------------------------------------------------------------
# Corpus
# ----------------------------------------------------------------------------------------------


def corpus_files(max_file_bytes: int) -> list[tuple[str, Path]]:
    roots = []
    for key in ("stdlib", "purelib", "platlib"):
        p = Path(sysconfig.get_paths()[key]).resolve()
        if p not in roots:
            roots.append(p)
    seen, out = set(), []
    for root in roots:
        for p in sorted(root.rglob("*.py")):
            try:
                rp = p.resolve()
                if rp in seen or not rp.is_file():
                    continue
                size = rp.stat().st_size
            except OSError:
                continue
            if size < 200 or size > max_file_bytes:
                continue
            seen.add(rp)
            out.append((f"{root.name}/{p.relative_to(root)}", rp))
    return out


def is_held_out(rel: str) -> bool:
    return int(hashlib.sha1(rel.encode()).hexdigest(), 16) % 40 == 0


def read_text(p: Path) -> str | None:
    try:
        t = p.read_text(encoding="utf-8")
    except (UnicodeDecodeError, OSError):
        return None
    return t if "\x00" not in t else None


# ----------------------------------------------------------------------------------------------
# Tokenizer (the construction of tools/make_qwen3_fixtures.py, larger vocabulary)
# ----------------------------------------------------------------------------------------------


def build_tokenizer(texts: list[str], vocab_size: int) -> Tokenizer:
    bpe_size = vocab_size - len(SPECIAL_TOKENS)
    tok = Tokenizer(models.BPE(dropout=None, unk_token=None, continuing_subword_prefix="", end_of_word_suffix="",
                               fuse_unk=False, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_SPLIT_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    tok.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    trainer = trainers.BpeTrainer(vocab_size=bpe_size, min_frequency=2, show_progress=False, special_tokens=[],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer=trainer, length=len(texts))
    assert tok.get_vocab_size(with_added_tokens=False) == bpe_size, tok.get_vocab_size()
    tok.add_tokens([AddedToken(c, special=s, normalized=False) for c, s in SPECIAL_TOKENS])
    assert tok.get_vocab_size(with_added_tokens=True) == vocab_size
    for i, (c, _) in enumerate(SPECIAL_TOKENS):
        assert tok.token_to_id(c) == bpe_size + i
    return tok


def write_tokenizer(tok: Tokenizer, out: Path, model_max_length: int) -> None:
    out.mkdir(parents=True, exist_ok=True)
    tok.save(str(out / "tokenizer.json"), pretty=True)
    added = {
        str(tok.token_to_id(c)): {"content": c, "lstrip": False, "normalized": False, "rstrip": False,
                                  "single_word": False, "special": s}
        for c, s in SPECIAL_TOKENS
    }
    cfg = {
        "add_bos_token": False, "add_prefix_space": False, "added_tokens_decoder": added,
        "additional_special_tokens": ["<|im_start|>", "<|im_end|>", "<|mask|>"], "bos_token": None,
        "chat_template": CHAT_TEMPLATE, "clean_up_tokenization_spaces": False, "eos_token": "<|im_end|>",
        "errors": "replace", "model_max_length": model_max_length, "pad_token": "<|endoftext|>",
        "split_special_tokens": False, "tokenizer_class": "Qwen2Tokenizer", "unk_token": None,
    }
    (out / "tokenizer_config.json").write_text(json.dumps(cfg, indent=2, ensure_ascii=False) + "\n")


def check_tokenizer(tok_dir: Path, vocab_size: int) -> None:
    """The raw tokenizer.json (what Rust's `tokenizers` reads) and transformers must agree."""
    raw = Tokenizer.from_file(str(tok_dir / "tokenizer.json"))
    hf = AutoTokenizer.from_pretrained(str(tok_dir))
    for s in ["def parse_args(argv=None):\n    parser = argparse.ArgumentParser()\n",
              "héllo wörld — “quotes” 你好 🌍 123456\r\n\ttab",
              "<|im_start|>user\nhi<|im_end|>\n<think>\n\n</think>\n\n<|mask|><|endoftext|>", ""]:
        a, b = raw.encode(s).ids, hf(s, add_special_tokens=False)["input_ids"]
        assert a == b, (s, a, b)
        assert hf.decode(b) == s
    assert len(hf) == vocab_size
    chat = hf.apply_chat_template([{"role": "user", "content": "Write a function."}], tokenize=False,
                                  add_generation_prompt=True)
    assert chat == "<|im_start|>user\nWrite a function.<|im_end|>\n<|im_start|>assistant\n", chat


# ----------------------------------------------------------------------------------------------
# The DFlash drafter (z-lab DFlashDraftModel semantics, parameter names of its checkpoints)
# ----------------------------------------------------------------------------------------------


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        dt = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dt)


def rope_cos_sin(pos, head_dim: int, theta: float):
    """pos [B, T] int -> cos, sin [B, 1, T, head_dim] (HF rotate_half layout)."""
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=pos.device, dtype=torch.float32) / head_dim))
    f = pos.float()[..., None] * inv
    emb = torch.cat([f, f], dim=-1)
    return emb.cos()[:, None], emb.sin()[:, None]


def apply_rope(x, cos, sin):
    x1, x2 = x.chunk(2, dim=-1)
    return (x.float() * cos + torch.cat([-x2, x1], dim=-1).float() * sin).to(x.dtype)


class DraftAttention(nn.Module):
    def __init__(self, h, nh, nkv, hd, eps):
        super().__init__()
        self.nh, self.nkv, self.hd = nh, nkv, hd
        self.q_proj = nn.Linear(h, nh * hd, bias=False)
        self.k_proj = nn.Linear(h, nkv * hd, bias=False)
        self.v_proj = nn.Linear(h, nkv * hd, bias=False)
        self.o_proj = nn.Linear(nh * hd, h, bias=False)
        self.q_norm = RMSNorm(hd, eps)
        self.k_norm = RMSNorm(hd, eps)

    def forward(self, x, ctx, rq, rk, mask):
        B, S, _ = x.shape
        N = ctx.shape[1]
        q = self.q_norm(self.q_proj(x).view(B, S, self.nh, self.hd)).transpose(1, 2)
        kv_in = torch.cat([ctx, x], dim=1)
        k = self.k_norm(self.k_proj(kv_in).view(B, N + S, self.nkv, self.hd)).transpose(1, 2)
        v = self.v_proj(kv_in).view(B, N + S, self.nkv, self.hd).transpose(1, 2)
        q, k = apply_rope(q, *rq), apply_rope(k, *rk)
        rep = self.nh // self.nkv  # GQA: query head i uses kv head i // rep
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=self.hd ** -0.5)
        return self.o_proj(o.transpose(1, 2).reshape(B, S, self.nh * self.hd))


class DraftLayer(nn.Module):
    def __init__(self, h, inter, nh, nkv, hd, eps):
        super().__init__()
        self.input_layernorm = RMSNorm(h, eps)
        self.self_attn = DraftAttention(h, nh, nkv, hd, eps)
        self.post_attention_layernorm = RMSNorm(h, eps)
        self.mlp = nn.Module()
        self.mlp.gate_proj = nn.Linear(h, inter, bias=False)
        self.mlp.up_proj = nn.Linear(h, inter, bias=False)
        self.mlp.down_proj = nn.Linear(inter, h, bias=False)

    def forward(self, hs, ctx, rq, rk, mask):
        hs = hs + self.self_attn(self.input_layernorm(hs), ctx, rq, rk, mask)
        y = self.post_attention_layernorm(hs)
        return hs + self.mlp.down_proj(F.silu(self.mlp.gate_proj(y)) * self.mlp.up_proj(y))


class DFlashDrafter(nn.Module):
    def __init__(self, h, inter, n_layers, nh, nkv, hd, n_feat, eps, theta):
        super().__init__()
        self.hd, self.theta = hd, theta
        self.fc = nn.Linear(n_feat * h, h, bias=False)
        self.hidden_norm = RMSNorm(h, eps)
        self.layers = nn.ModuleList(DraftLayer(h, inter, nh, nkv, hd, eps) for _ in range(n_layers))
        self.norm = RMSNorm(h, eps)
        for n, p in self.named_parameters():
            if p.dim() == 2:
                nn.init.normal_(p, std=0.02)

    def forward(self, block_emb, features, q_pos, k_pos, mask):
        """block_emb [B,S,H] (target embeddings of the blocks), features [B,N,F] (target features of the
        context rows), q_pos [B,S], k_pos [B,N+S], mask [B,1,S,N+S] bool (True = attend).
        Returns the drafter's final-norm hidden states of the block rows [B,S,H]."""
        ctx = self.hidden_norm(self.fc(features))
        rq, rk = rope_cos_sin(q_pos, self.hd, self.theta), rope_cos_sin(k_pos, self.hd, self.theta)
        h = block_emb
        for layer in self.layers:
            h = layer(h, ctx, rq, rk, mask)
        return self.norm(h)


# ----------------------------------------------------------------------------------------------
# Main
# ----------------------------------------------------------------------------------------------


def main():
    global LOG
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(ROOT / "models" / "demo"))
    ap.add_argument("--tiny", action="store_true", help="CPU smoke test: tiny sizes and budgets")
    ap.add_argument("--target-seconds", type=float, default=170)
    ap.add_argument("--draft-seconds", type=float, default=120)
    ap.add_argument("--corpus-mb", type=float, default=160)
    ap.add_argument("--total-seconds", type=float, default=480,
                    help="the whole run's budget: the target phase shrinks when data preparation was slow")
    args = ap.parse_args()
    tiny = args.tiny
    out = Path(args.out)
    (out / "target").mkdir(parents=True, exist_ok=True)
    (out / "draft").mkdir(parents=True, exist_ok=True)
    LOG = open(out / "train_log.txt", "w")
    dev = torch.device("cuda" if torch.cuda.is_available() and not tiny else "cpu")
    amp = torch.autocast("cuda", dtype=torch.bfloat16) if dev.type == "cuda" else torch.autocast("cpu", enabled=False)
    log(f"python {sys.version.split()[0]} torch {torch.__version__} transformers {transformers.__version__} "
        f"tokenizers {tokenizers.__version__} device {dev} "
        f"{torch.cuda.get_device_name() if dev.type == 'cuda' else ''}")
    torch.manual_seed(0)
    random.seed(0)
    if dev.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True

    # Sizes.
    VOCAB = 1024 if tiny else 8192
    H, INTER, LAYERS, NH, NKV, HD = (64, 128, 3, 2, 1, 32) if tiny else (256, 768, 8, 4, 2, 64)
    TARGET_LAYER_IDS = [0, 1] if tiny else [1, 4, 6]
    D_LAYERS = 1 if tiny else 3
    SEQ, BATCH = (128, 8) if tiny else (512, 128)
    BLOCK, GAMMA = 16, 7.0
    THETA, EPS = 1e6, 1e-6
    corpus_bytes = int((2 if tiny else args.corpus_mb) * 1e6)
    t_target = 15 if tiny else args.target_seconds
    t_draft = 15 if tiny else args.draft_seconds

    # ---- corpus
    files = corpus_files(max_file_bytes=300_000)
    rng = random.Random(0)
    rng.shuffle(files)
    held = [(r, p) for r, p in files if is_held_out(r)]
    train_texts, total = [], 0
    for r, p in files:
        if is_held_out(r):
            continue
        t = read_text(p)
        if t is None:
            continue
        train_texts.append(t)
        total += len(t)
        if total >= corpus_bytes:
            break
    log(f"corpus: {len(files)} .py files found, {len(held)} held out; training on {len(train_texts)} files, "
        f"{total / 1e6:.1f} M chars")

    # ---- tokenizer
    tok_texts, n = [], 0
    for t in train_texts:
        tok_texts.append(t)
        n += len(t)
        if n >= (1e6 if tiny else 40e6):
            break
    tok = build_tokenizer(tok_texts, VOCAB)
    write_tokenizer(tok, out / "target", model_max_length=4096)
    check_tokenizer(out / "target", VOCAB)
    EOT, IM_START, IM_END = (tok.token_to_id(c) for c in ("<|endoftext|>", "<|im_start|>", "<|im_end|>"))
    MASK = tok.token_to_id("<|mask|>")
    log(f"tokenizer: {VOCAB} ids, trained on {n / 1e6:.1f} M chars; mask id {MASK}")
    ids = []
    for i in range(0, len(train_texts), 2048):
        for e in tok.encode_batch(train_texts[i:i + 2048]):
            ids.extend(e.ids)
            ids.append(EOT)
    data = torch.tensor(ids, dtype=torch.int32)
    del ids
    log(f"train tokens: {len(data) / 1e6:.2f} M ({total / len(data):.2f} chars/token)")

    # ---- eval prompts: code prefixes from held-out files, starting at a top-level or method `def`
    prompts = []
    for r, p in held:
        t = read_text(p)
        if t is None:
            continue
        lines = t.splitlines(keepends=True)
        starts = [i for i, l in enumerate(lines) if l.lstrip().startswith("def ") and i >= 3]
        if not starts:
            continue
        i = starts[len(starts) // 2]
        text = "".join(lines[max(0, i - 6):i + 3])
        if 120 <= len(text) <= 700 and len(tok.encode(text).ids) <= 200:
            prompts.append({"file": r, "prompt": text})
        if len(prompts) == 16:
            break
    (out / "eval_prompts.json").write_text(json.dumps(prompts, indent=2, ensure_ascii=False) + "\n")
    log(f"eval prompts: {len(prompts)} from held-out files")

    # ---- target
    if not tiny:  # keep ~draft_seconds + 80 s for generation, features, the drafter and saving
        t_target = max(30.0, min(t_target, args.total_seconds - (time.time() - T0) - t_draft - 80))
        log(f"target phase budget {t_target:.0f} s")
    cfg = Qwen3Config(
        vocab_size=VOCAB, hidden_size=H, intermediate_size=INTER, num_hidden_layers=LAYERS,
        num_attention_heads=NH, num_key_value_heads=NKV, head_dim=HD, rms_norm_eps=EPS,
        max_position_embeddings=4096, tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": THETA},
        bos_token_id=EOT, eos_token_id=IM_END, pad_token_id=EOT, attention_bias=False, hidden_act="silu",
        use_sliding_window=False, dtype="float32",
    )
    target = Qwen3ForCausalLM(cfg).to(dev)
    target.set_attn_implementation("sdpa")
    n_params = sum(p.numel() for p in target.parameters())
    log(f"target: {LAYERS} layers, hidden {H}, {n_params / 1e6:.2f} M params")
    opt = torch.optim.AdamW(target.parameters(), lr=2e-3, betas=(0.9, 0.95), weight_decay=0.1,
                            fused=dev.type == "cuda")
    data_dev = data.to(dev)
    step, t_start, warm = 0, time.time(), 100
    while True:
        frac = (time.time() - t_start) / t_target
        if frac >= 1:
            break
        lr = 2e-3 * min(1, (step + 1) / warm) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(frac, 1))))
        for g in opt.param_groups:
            g["lr"] = lr
        off = torch.randint(0, len(data_dev) - SEQ - 1, (BATCH,), device=dev)
        x = data_dev[off[:, None] + torch.arange(SEQ + 1, device=dev)].long()
        with amp:
            logits = target(input_ids=x[:, :-1]).logits
        loss = F.cross_entropy(logits.float().view(-1, VOCAB), x[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(target.parameters(), 1.0)
        opt.step()
        step += 1
        if step % 100 == 0 or step == 1:
            log(f"target step {step} loss {loss.item():.3f} lr {lr:.2e} "
                f"tokens {step * BATCH * SEQ / 1e6:.1f}M")
    log(f"target done: {step} steps, {step * BATCH * SEQ / 1e6:.1f} M tokens")
    target.eval()
    for p in target.parameters():
        p.requires_grad_(False)

    # held-out loss
    held_ids = []
    for r, p in held[:200]:
        t = read_text(p)
        if t:
            held_ids.extend(tok.encode(t).ids + [EOT])
    held_t = torch.tensor(held_ids[: (len(held_ids) // SEQ) * SEQ][: 64 * SEQ], dtype=torch.long, device=dev)
    if len(held_t) >= SEQ:
        hx = held_t.view(-1, SEQ)
        with torch.no_grad(), amp:
            hl = F.cross_entropy(target(input_ids=hx[:, :-1]).logits.float().reshape(-1, VOCAB), hx[:, 1:].reshape(-1))
        log(f"target held-out loss {hl.item():.3f} ({hx.numel() / 1e3:.0f}k tokens)")

    # save the target now (bfloat16)
    gen_cfg = GenerationConfig(bos_token_id=EOT, eos_token_id=[IM_END, EOT], pad_token_id=EOT,
                               do_sample=True, temperature=0.6, top_k=20, top_p=0.95)
    save_t = Qwen3ForCausalLM(cfg)
    save_t.load_state_dict({k: v.detach().cpu() for k, v in target.state_dict().items()})
    save_t = save_t.to(torch.bfloat16)
    save_t.config.dtype = "bfloat16"
    save_t.generation_config = gen_cfg
    save_t.save_pretrained(out / "target")
    del save_t
    log("target saved")

    # ---- drafter data: the target's greedy continuations of corpus prompts
    P, G = (16, 48) if tiny else (64, 192)
    L = P + G
    N_SEQ = 32 if tiny else 32768
    GEN_BATCH = 16 if tiny else 8192
    seqs = []
    with torch.no_grad(), amp:
        for b0 in range(0, N_SEQ, GEN_BATCH):
            off = torch.randint(0, len(data_dev) - P, (GEN_BATCH,), device=dev)
            x = data_dev[off[:, None] + torch.arange(P, device=dev)].long()
            o = target(input_ids=x, use_cache=True)
            pkv, nxt, toks = o.past_key_values, o.logits[:, -1].argmax(-1), [x]
            for _ in range(G - 1):
                toks.append(nxt[:, None])
                o = target(input_ids=nxt[:, None], past_key_values=pkv, use_cache=True)
                pkv, nxt = o.past_key_values, o.logits[:, -1].argmax(-1)
            toks.append(nxt[:, None])
            seqs.append(torch.cat(toks, 1))
    seqs = torch.cat(seqs)
    log(f"drafter data: {len(seqs)} greedy continuations, prompt {P} + {G} tokens")
    log("sample continuation:", repr(tok.decode(seqs[0].tolist())[:600]))

    # context features of every sequence (frozen target), bf16 on the device
    NF = len(TARGET_LAYER_IDS)
    feats = torch.empty(len(seqs), L, NF * H, dtype=torch.bfloat16 if dev.type == "cuda" else torch.float32,
                        device=dev)
    with torch.no_grad(), amp:
        for b0 in range(0, len(seqs), 1024):
            hs = target(input_ids=seqs[b0:b0 + 1024], output_hidden_states=True).hidden_states
            feats[b0:b0 + 1024] = torch.cat([hs[i + 1] for i in TARGET_LAYER_IDS], -1).to(feats.dtype)
    embed_w = target.model.embed_tokens.weight  # tied: also the LM head
    log(f"features: {tuple(feats.shape)}")

    # ---- drafter training
    drafter = DFlashDrafter(H, INTER, D_LAYERS, NH, NKV, HD, NF, EPS, THETA).to(dev)
    log(f"drafter: {D_LAYERS} layers, {sum(p.numel() for p in drafter.parameters()) / 1e6:.2f} M params, "
        f"target_layer_ids {TARGET_LAYER_IDS}")
    n_val = max(2, len(seqs) // 32)
    val_idx, tr_idx = torch.arange(n_val, device=dev), torch.arange(n_val, len(seqs), device=dev)
    K = 4 if tiny else 16  # blocks per sequence
    DB = 8 if tiny else 128
    depth_w = torch.exp(-torch.arange(BLOCK - 1, device=dev, dtype=torch.float32) / GAMMA)
    depth_w = depth_w / depth_w.sum()
    dopt = torch.optim.AdamW(drafter.parameters(), lr=1.5e-3, betas=(0.9, 0.95), weight_decay=0.01,
                             fused=dev.type == "cuda")

    def draft_batch(idx, gen):
        B = len(idx)
        s, f = seqs[idx], feats[idx]
        # anchors: distinct, in [P-1, L-BLOCK]; the labels anchor+1..anchor+15 are target choices
        scores = torch.rand(B, L - BLOCK - (P - 1) + 1, device=dev, generator=gen)
        anchors = scores.topk(K, dim=1).indices + (P - 1)  # [B, K]
        ar = torch.arange(BLOCK, device=dev)
        pos = anchors[:, :, None] + ar  # [B, K, 16]
        labels = torch.gather(s, 1, pos.view(B, -1)).view(B, K, BLOCK)
        block_ids = torch.full_like(labels, MASK)
        block_ids[:, :, 0] = labels[:, :, 0]
        emb = F.embedding(block_ids.view(B, K * BLOCK), embed_w)
        q_pos = pos.view(B, K * BLOCK)
        k_pos = torch.cat([torch.arange(L, device=dev).expand(B, L), q_pos], 1)
        ctx_vis = torch.arange(L, device=dev)[None, None, :] < anchors[:, :, None]  # [B, K, L]
        ctx_vis = ctx_vis[:, :, None, :].expand(B, K, BLOCK, L).reshape(B, K * BLOCK, L)
        blk = torch.arange(K, device=dev).repeat_interleave(BLOCK)
        blk_vis = (blk[:, None] == blk[None, :]).expand(B, K * BLOCK, K * BLOCK)
        mask = torch.cat([ctx_vis, blk_vis], -1)[:, None]
        hid = drafter(emb.to(f.dtype) if dev.type == "cuda" else emb, f, q_pos, k_pos, mask)
        hid = hid.view(B, K, BLOCK, H)[:, :, 1:]
        logits = F.linear(hid, embed_w).float()  # [B, K, 15, V]
        tgt = labels[:, :, 1:]
        ce = F.cross_entropy(logits.reshape(-1, VOCAB), tgt.reshape(-1), reduction="none").view(B, K, BLOCK - 1)
        loss = (ce * depth_w).sum(-1).mean()
        correct = logits.argmax(-1) == tgt
        tau = 1 + correct.long().cumprod(-1).sum(-1).float().mean()  # chain acceptance length of the block
        return loss, tau, correct.float().mean((0, 1))

    gen = torch.Generator(device=dev).manual_seed(1)
    vgen_seed = 2
    step, t_start, warm = 0, time.time(), 100
    while True:
        frac = (time.time() - t_start) / t_draft
        if frac >= 1:
            break
        lr = 1.5e-3 * min(1, (step + 1) / warm) * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * frac)))
        for g in dopt.param_groups:
            g["lr"] = lr
        idx = tr_idx[torch.randint(0, len(tr_idx), (DB,), device=dev, generator=gen)]
        with amp:
            loss, tau, _ = draft_batch(idx, gen)
        dopt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(drafter.parameters(), 1.0)
        dopt.step()
        step += 1
        if step % 100 == 0 or step == 1:
            log(f"drafter step {step} loss {loss.item():.3f} train-block chain tau {tau.item():.2f} lr {lr:.2e}")
    log(f"drafter done: {step} steps")
    drafter.eval()
    with torch.no_grad(), amp:
        vg = torch.Generator(device=dev).manual_seed(vgen_seed)
        vl, vt, vacc = [], [], []
        for b0 in range(0, n_val, DB):
            loss, tau, acc = draft_batch(val_idx[b0:b0 + DB], vg)
            vl.append(loss.item()); vt.append(tau.item()); vacc.append(acc)
        acc = torch.stack(vacc).mean(0)
    log(f"drafter validation (held-out continuations): loss {sum(vl) / len(vl):.3f}, "
        f"chain tau (teacher-forced blocks) {sum(vt) / len(vt):.2f}; per-depth accuracy "
        + " ".join(f"{a:.2f}" for a in acc.tolist()))

    # ---- save the drafter (z-lab format, bfloat16)
    sd = {k: v.detach().to(torch.bfloat16).cpu().contiguous() for k, v in drafter.state_dict().items()}
    save_file(sd, str(out / "draft" / "model.safetensors"), metadata={"format": "pt"})
    dcfg = {
        "architectures": ["DFlashDraftModel"], "attention_bias": False, "attention_dropout": 0.0,
        "auto_map": {"AutoModel": "dflash.DFlashDraftModel"}, "block_size": BLOCK, "bos_token_id": EOT,
        "dflash_config": {"mask_token_id": MASK, "target_layer_ids": TARGET_LAYER_IDS}, "dtype": "bfloat16",
        "eos_token_id": IM_END, "head_dim": HD, "hidden_act": "silu", "hidden_size": H,
        "initializer_range": 0.02, "intermediate_size": INTER, "layer_types": ["full_attention"] * D_LAYERS,
        "max_position_embeddings": 4096, "max_window_layers": D_LAYERS, "model_type": "qwen3",
        "num_attention_heads": NH, "num_hidden_layers": D_LAYERS, "num_key_value_heads": NKV,
        "num_target_layers": LAYERS, "rms_norm_eps": EPS, "rope_scaling": None, "rope_theta": THETA,
        "sliding_window": None, "tie_word_embeddings": False, "use_cache": True, "use_sliding_window": False,
        "vocab_size": VOCAB,
    }
    (out / "draft" / "config.json").write_text(json.dumps(dcfg, indent=2) + "\n")
    log(f"drafter saved: {len(sd)} tensors")

    # ---- a sample: greedy text from the saved target on the first eval prompt
    if prompts:
        x = torch.tensor([tok.encode(prompts[0]["prompt"]).ids], device=dev)
        with torch.no_grad(), amp:
            for _ in range(64):
                x = torch.cat([x, target(input_ids=x).logits[:, -1:].argmax(-1)], 1)
        log("sample greedy output on eval prompt 0:", repr(tok.decode(x[0].tolist())))
    log("done")


if __name__ == "__main__":
    main()
