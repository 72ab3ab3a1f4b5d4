#!/usr/bin/env python3
"""Golden test fixtures for the Qwen3 dense target (tokenizer, tiny checkpoints, expected outputs).

What it makes (all deterministic: fixed seeds, fixed corpus file list), under `fixtures/`:

* `fixtures/tokenizer/`
    - `tokenizer.json`: a real byte-level BPE trained with the `tokenizers` library on a fixed list of
      Python standard-library sources (Qwen2 layout: NFC normalizer, Qwen2 split regex + ByteLevel
      pre-tokenizer, ByteLevel decoder and post-processor). 1018 BPE tokens (256 bytes + 762 merges)
      then 6 added tokens, 1024 in all: `<|endoftext|>`=1018, `<|im_start|>`=1019, `<|im_end|>`=1020,
      `<think>`=1021, `</think>`=1022 (both special=false, as in Qwen3), `<|mask|>`=1023.
    - `tokenizer_config.json`: Qwen2Tokenizer, eos `<|im_end|>`, pad `<|endoftext|>`, no bos, and a
      Qwen3-style chat template (system/user/assistant, `add_generation_prompt`, `enable_thinking`,
      `<think>` reasoning handling, `raise_exception` for an unknown role).
    - `chat_template_goldens.json`: messages -> the exact string `apply_chat_template` renders (+ ids).
    - `chat_template_errors.json`: inputs the template must reject, with the error text.
    - `encode_goldens.json`: text -> token ids -> decoded text.
* `fixtures/qwen3-tiny-tied/`, `fixtures/qwen3-tiny-untied/` (sharded, YaRN RoPE),
  `fixtures/qwen3-tiny-untied-single/` (same weights, one file): random float32 Qwen3 checkpoints
  saved with `save_pretrained`, plus generation_config.json, tokenizer files, and
  `expected.safetensors` + `expected.json` (full-forward logits and hidden states, tree-verify logits
  computed the way the reference DDTree verify does it, plain-path logits for the same nodes, greedy
  continuations). `expected.json` documents every tensor.

Run (from the repository root; takes well under a minute on 2 CPU cores):

    /work/pyenv/bin/python tools/make_qwen3_fixtures.py

Versions it was run with: Python 3.11, torch 2.11.0 (CPU), transformers 5.17.0, tokenizers 0.23.3,
safetensors 0.8.0, numpy 2.4.6. The script records the versions it actually ran with in every
`expected.json` and warns when they differ from these. Nothing is downloaded: every model is built
from a config with random weights.
"""

from __future__ import annotations

import json
import shutil
import sys
import sysconfig
import warnings
from pathlib import Path

import numpy as np
import safetensors
import tokenizers
import torch
import transformers
from safetensors.torch import load_file, save_file
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import AutoModelForCausalLM, AutoTokenizer, DynamicCache, GenerationConfig, Qwen3Config, Qwen3ForCausalLM

PINNED = {"torch": "2.11.0", "transformers": "5.17.0", "tokenizers": "0.23.3"}

ROOT = Path(__file__).resolve().parent.parent
FIX = ROOT / "fixtures"
TOK_DIR = FIX / "tokenizer"

VOCAB_SIZE = 1024
SPECIAL_TOKENS = [  # (content, special) in id order after the BPE vocabulary, like Qwen3
    ("<|endoftext|>", True),
    ("<|im_start|>", True),
    ("<|im_end|>", True),
    ("<think>", False),
    ("</think>", False),
    ("<|mask|>", True),
]
BPE_SIZE = VOCAB_SIZE - len(SPECIAL_TOKENS)

# Same regex as transformers' Qwen2Tokenizer (and Qwen2/Qwen3 tokenizer.json).
QWEN2_SPLIT_REGEX = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)

# Fixed corpus: standard-library modules present in every CPython 3.9-3.13 (~500 KB).
CORPUS_FILES = [
    "argparse.py", "difflib.py", "dataclasses.py", "statistics.py", "calendar.py", "textwrap.py",
    "functools.py", "heapq.py", "fractions.py", "shlex.py", "string.py", "json/__init__.py",
    "json/decoder.py", "json/encoder.py", "json/scanner.py", "json/tool.py",
]

# Qwen3-style chat template (Qwen3's own, minus tool calling; plus an error for unknown roles).
CHAT_TEMPLATE = r"""{%- if messages[0].role == 'system' %}
    {{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}
{%- endif %}
{%- set ns = namespace(found_query=false, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- if not ns.found_query and message.role == 'user' and message.content is string %}
        {%- set ns.found_query = true %}
        {%- set ns.last_query_index = index %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- if message.content is string %}
        {%- set content = message.content %}
    {%- else %}
        {%- set content = '' %}
    {%- endif %}
    {%- if message.role == 'system' %}
        {%- if not loop.first %}
            {{- '<|im_start|>system\n' + content + '<|im_end|>\n' }}
        {%- endif %}
    {%- elif message.role == 'user' %}
        {{- '<|im_start|>user\n' + content + '<|im_end|>\n' }}
    {%- elif message.role == 'assistant' %}
        {%- set reasoning_content = '' %}
        {%- if message.reasoning_content is string %}
            {%- set reasoning_content = message.reasoning_content %}
        {%- elif '</think>' in content %}
            {%- set reasoning_content = content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') %}
            {%- set content = content.split('</think>')[-1].lstrip('\n') %}
        {%- endif %}
        {%- if loop.index0 > ns.last_query_index and (loop.last or reasoning_content) %}
            {{- '<|im_start|>assistant\n<think>\n' + reasoning_content.strip('\n') + '\n</think>\n\n' + content.lstrip('\n') }}
        {%- else %}
            {{- '<|im_start|>assistant\n' + content }}
        {%- endif %}
        {{- '<|im_end|>\n' }}
    {%- else %}
        {{- raise_exception('Unknown role: ' + message.role) }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\n\n</think>\n\n' }}
    {%- endif %}
{%- endif %}"""

PLAIN_PROMPT = "The quick brown fox jumps over the lazy dog.\n"
CHAT_PROMPT_MESSAGES = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "Write a function that reverses a list."},
]
LONG_PROMPT = (  # >= 100 tokens (asserted): longer than the YaRN model's original_max_position_embeddings (64)
    "Return a new list containing all items from the iterable in ascending order. A custom key function can "
    "be supplied to customize the sort order, and the reverse flag can be set to request the result in "
    "descending order. The sort is guaranteed to be stable: it does not change the relative order of equal "
    "elements."
)

MODELS = {
    "qwen3-tiny-tied": dict(
        seed=1234,
        embed_std=0.2,
        linear_std=0.16,  # strong enough that the layers beat the tied-embedding echo (varied greedy output)
        lm_head_std=None,  # tied to embed_tokens
        config=dict(
            vocab_size=VOCAB_SIZE, hidden_size=64, intermediate_size=160, num_hidden_layers=3,
            num_attention_heads=4, num_key_value_heads=2, head_dim=32, rms_norm_eps=1e-6,
            max_position_embeddings=512, tie_word_embeddings=True,
            rope_parameters={"rope_type": "default", "rope_theta": 1e6},
        ),
        shard=None,
    ),
    "qwen3-tiny-untied": dict(
        seed=5678,
        embed_std=0.1,
        linear_std=0.08,
        lm_head_std=0.3,
        config=dict(
            vocab_size=VOCAB_SIZE, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=1, head_dim=16, rms_norm_eps=1e-6,
            max_position_embeddings=256, tie_word_embeddings=False,
            rope_parameters={
                "rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64,
                "rope_theta": 1e6,
            },
        ),
        shard="300KB",
    ),
}
SINGLE_COPY = ("qwen3-tiny-untied", "qwen3-tiny-untied-single")

TREE_TOL = 1e-5
GREEDY_NEW_TOKENS = 32


# ----------------------------------------------------------------------------------------------
# Tokenizer
# ----------------------------------------------------------------------------------------------


def corpus_paths() -> list[Path]:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    paths = [stdlib / f for f in CORPUS_FILES]
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        sys.exit(f"corpus files missing: {missing}")
    return paths


def build_tokenizer() -> Tokenizer:
    tok = Tokenizer(
        models.BPE(
            dropout=None, unk_token=None, continuing_subword_prefix="", end_of_word_suffix="",
            fuse_unk=False, byte_fallback=False,
        )
    )
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_SPLIT_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    tok.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    trainer = trainers.BpeTrainer(
        vocab_size=BPE_SIZE, min_frequency=2, show_progress=False, special_tokens=[],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    texts = [p.read_text(encoding="utf-8") for p in corpus_paths()]
    tok.train_from_iterator(texts, trainer=trainer, length=len(texts))
    assert tok.get_vocab_size(with_added_tokens=False) == BPE_SIZE, tok.get_vocab_size()
    tok.add_tokens([AddedToken(c, special=s, normalized=False) for c, s in SPECIAL_TOKENS])
    assert tok.get_vocab_size(with_added_tokens=True) == VOCAB_SIZE
    for i, (c, _) in enumerate(SPECIAL_TOKENS):
        assert tok.token_to_id(c) == BPE_SIZE + i
    return tok


def token_id(name: str) -> int:
    return BPE_SIZE + [c for c, _ in SPECIAL_TOKENS].index(name)


def write_tokenizer(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    tok = build_tokenizer()
    tok.save(str(out / "tokenizer.json"), pretty=True)
    added = {
        str(token_id(c)): {
            "content": c, "lstrip": False, "normalized": False, "rstrip": False,
            "single_word": False, "special": s,
        }
        for c, s in SPECIAL_TOKENS
    }
    cfg = {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": added,
        "additional_special_tokens": ["<|im_start|>", "<|im_end|>", "<|mask|>"],
        "bos_token": None,
        "chat_template": CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>",
        "errors": "replace",
        "model_max_length": 512,
        "pad_token": "<|endoftext|>",
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
    }
    (out / "tokenizer_config.json").write_text(json.dumps(cfg, indent=2, ensure_ascii=False) + "\n")


def check_tokenizer(tok_dir: Path, hf_tok) -> None:
    """The raw tokenizer.json (what Rust's `tokenizers` reads) and transformers must agree."""
    raw = Tokenizer.from_file(str(tok_dir / "tokenizer.json"))
    samples = [
        PLAIN_PROMPT, LONG_PROMPT, "héllo wörld — “quotes” 'single' 你好 🌍 123456",
        "<|im_start|>user\nhi<|im_end|>\n<think>\nx\n</think>\n\n<|mask|><|endoftext|>",
        "  leading spaces\ttab\r\nwindows\n\n\nnewlines   ", "",
    ]
    for s in samples:
        a = raw.encode(s).ids
        b = hf_tok(s, add_special_tokens=False)["input_ids"]
        assert a == b, (s, a, b)
        assert hf_tok.decode(b) == s, (s, hf_tok.decode(b))
    assert len(hf_tok) == VOCAB_SIZE, len(hf_tok)
    assert hf_tok.eos_token_id == token_id("<|im_end|>")
    assert hf_tok.pad_token_id == token_id("<|endoftext|>")
    assert hf_tok.bos_token is None


def chat_cases() -> list[dict]:
    sys_msg = {"role": "system", "content": "You are a concise assistant."}
    u1 = {"role": "user", "content": "What is 2+2?"}
    a1 = {"role": "assistant", "content": "4"}
    u2 = {"role": "user", "content": "And 3+3?"}
    a_think = {"role": "assistant", "content": "<think>\nThe user asks 3+3.\nThat is 6.\n</think>\n\n6"}
    uni = {"role": "user", "content": "Héllo “wörld” — 你好 🌍 \"double\" 'single' back\\slash {{ not_jinja }} <b>"}
    return [
        dict(messages=[u1], add_generation_prompt=True),
        dict(messages=[u1], add_generation_prompt=True, enable_thinking=False),
        dict(messages=[u1], add_generation_prompt=True, enable_thinking=True),
        dict(messages=[sys_msg, u1], add_generation_prompt=True),
        dict(messages=[sys_msg, u1, a1, u2], add_generation_prompt=True, enable_thinking=False),
        dict(messages=[sys_msg, u1, a1, u2, a_think], add_generation_prompt=False),
        dict(messages=[u1, a_think, u2], add_generation_prompt=True),
        dict(messages=[u1, {"role": "assistant", "content": "4", "reasoning_content": "Simple sum."}],
             add_generation_prompt=False),
        dict(messages=[uni], add_generation_prompt=True, enable_thinking=False),
        dict(messages=[sys_msg, u1, a1], add_generation_prompt=False),
        dict(messages=[u1, a1, {"role": "system", "content": "Now answer in French."}, u2],
             add_generation_prompt=True),
        dict(messages=[{"role": "user", "content": ""}], add_generation_prompt=False),
        dict(messages=[u1, {"role": "assistant", "content": "<think>\n\n</think>\n\n4"}],
             add_generation_prompt=False, enable_thinking=False),
    ]


def write_chat_goldens(tok_dir: Path, hf_tok) -> None:
    goldens = []
    for case in chat_cases():
        kwargs = {k: v for k, v in case.items() if k != "messages"}
        rendered = hf_tok.apply_chat_template(case["messages"], tokenize=False, **kwargs)
        ids = hf_tok(rendered, add_special_tokens=False)["input_ids"]
        goldens.append({**case, "rendered": rendered, "token_ids": ids})
    (tok_dir / "chat_template_goldens.json").write_text(json.dumps(goldens, indent=2, ensure_ascii=False) + "\n")

    errors = []
    for messages in (
        [{"role": "user", "content": "hi"}, {"role": "tool", "content": "42"}],
        [{"role": "developer", "content": "be brief"}],
    ):
        try:
            hf_tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        except Exception as e:  # transformers raises TemplateError from raise_exception
            errors.append({"messages": messages, "add_generation_prompt": True,
                           "error_contains": f"Unknown role: {messages[-1]['role']}", "hf_error": str(e)})
            assert errors[-1]["error_contains"] in str(e), str(e)
        else:
            raise AssertionError("template accepted an unknown role")
    (tok_dir / "chat_template_errors.json").write_text(json.dumps(errors, indent=2, ensure_ascii=False) + "\n")

    enc = []
    for s in [PLAIN_PROMPT, "héllo wörld — “quotes” 你好 🌍 0123456789",
              "<|im_start|>user\nhi<|im_end|>\n<think>\n\n</think>\n\n<|mask|>", "\n\n  \t x  "]:
        ids = hf_tok(s, add_special_tokens=False)["input_ids"]
        enc.append({"text": s, "ids": ids, "tokens": hf_tok.convert_ids_to_tokens(ids),
                    "decoded": hf_tok.decode(ids),
                    "decoded_skip_special": hf_tok.decode(ids, skip_special_tokens=True)})
    (tok_dir / "encode_goldens.json").write_text(json.dumps(enc, indent=2, ensure_ascii=False) + "\n")


# ----------------------------------------------------------------------------------------------
# Models
# ----------------------------------------------------------------------------------------------


def build_model(name: str) -> Qwen3ForCausalLM:
    spec = MODELS[name]
    cfg = Qwen3Config(
        **spec["config"], bos_token_id=token_id("<|endoftext|>"), eos_token_id=token_id("<|im_end|>"),
        attention_bias=False, hidden_act="silu", use_sliding_window=False, dtype="float32",
    )
    torch.manual_seed(spec["seed"])
    model = Qwen3ForCausalLM(cfg).to(torch.float32)
    gen = torch.Generator().manual_seed(spec["seed"])
    with torch.no_grad():
        for pname, p in sorted(model.named_parameters(), key=lambda kv: kv[0]):
            if pname.endswith("norm.weight"):  # input/post-attention/final/q/k norms: 1 +- 0.1
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=gen))
            elif "embed_tokens" in pname:  # tied: also the LM head, so a little larger
                p.copy_(spec["embed_std"] * torch.randn(p.shape, generator=gen))
            elif "lm_head" in pname:  # large enough that next-token distributions are peaked, not uniform
                p.copy_(spec["lm_head_std"] * torch.randn(p.shape, generator=gen))
            else:  # q/k/v/o and MLP projections
                p.copy_(spec["linear_std"] * torch.randn(p.shape, generator=gen))
    model.set_attn_implementation("eager")
    assert model.config._attn_implementation == "eager"
    model.eval()
    return model


def generation_config() -> GenerationConfig:
    # Mirrors Qwen3's generation_config.json, with this vocabulary's ids.
    return GenerationConfig(
        bos_token_id=token_id("<|endoftext|>"),
        eos_token_id=[token_id("<|im_end|>"), token_id("<|endoftext|>")],
        pad_token_id=token_id("<|endoftext|>"),
        do_sample=True, temperature=0.6, top_k=20, top_p=0.95,
    )


def save_model(model, out: Path, shard: str | None) -> None:
    if out.exists():
        shutil.rmtree(out)
    model.generation_config = generation_config()
    kwargs = {"max_shard_size": shard} if shard else {}
    model.save_pretrained(out, **kwargs)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(TOK_DIR / f, out / f)


# ----------------------------------------------------------------------------------------------
# Expected outputs
# ----------------------------------------------------------------------------------------------


def forward_full(model, ids: list[int]):
    """Plain causal forward over `ids` (no cache). Returns (logits [T,V], hidden [L+1,T,H], pre-norm last layer)."""
    captured = {}
    hook = model.model.layers[-1].register_forward_hook(lambda m, a, o: captured.__setitem__("h", o))
    try:
        out = model(torch.tensor([ids]), use_cache=False, output_hidden_states=True)
    finally:
        hook.remove()
    hs = torch.stack([h[0] for h in out.hidden_states])
    last = captured["h"][0] if not isinstance(captured["h"], tuple) else captured["h"][0][0]
    return out.logits[0], hs, last


def random_tree(kind: str, n: int, rng: np.random.Generator, vocab_hi: int):
    parents = [-1]
    for i in range(1, n):
        if kind == "chain":
            parents.append(i - 1)
        elif kind == "bushy":  # parents drawn from the earliest half: wide, shallow
            parents.append(int(rng.integers(0, (i + 1) // 2)))
        else:  # random recursive tree
            parents.append(int(rng.integers(0, i)))
    depths = [0] * n
    for i in range(1, n):
        depths[i] = depths[parents[i]] + 1
    # Tokens: random; siblings distinct (as DDTree's top-K children are).
    tokens = [int(rng.integers(0, vocab_hi))]
    used: dict[int, set] = {}
    for i in range(1, n):
        s = used.setdefault(parents[i], set())
        while True:
            t = int(rng.integers(0, vocab_hi))
            if t not in s:
                s.add(t)
                tokens.append(t)
                break
    return tokens, parents, depths


def ancestors(parents: list[int], i: int) -> list[int]:
    path = []
    while i >= 0:
        path.append(i)
        i = parents[i]
    return path[::-1]  # root .. i


def tree_verify(model, prefix: list[int], tokens: list[int], parents: list[int], depths: list[int]):
    """One target forward over the tree on top of a prefilled DynamicCache, like the reference verify."""
    P, N = len(prefix), len(tokens)
    cache = DynamicCache(config=model.config)
    model(torch.tensor([prefix]), position_ids=torch.arange(P)[None], past_key_values=cache, use_cache=True)
    assert cache.get_seq_length() == P
    dtype = model.dtype
    mask = torch.zeros((1, 1, N, P + N), dtype=dtype)  # prefix columns: visible (0)
    block = torch.full((N, N), torch.finfo(dtype).min, dtype=dtype)
    for i in range(N):
        for a in ancestors(parents, i):
            block[i, a] = 0.0
    mask[0, 0, :, P:] = block
    position_ids = torch.tensor([[P + d for d in depths]])
    out = model(
        torch.tensor([tokens]), position_ids=position_ids, attention_mask=mask, past_key_values=cache,
        use_cache=True, output_hidden_states=True,
    )
    assert cache.get_seq_length() == P + N
    return out.logits[0], torch.stack([h[0] for h in out.hidden_states]), mask


def greedy_manual(model, ids: list[int], steps: int):
    """Greedy by full re-forwards (no cache): tokens and the top1-top2 logit gap at every step."""
    seq, gaps = list(ids), []
    for _ in range(steps):
        logits = model(torch.tensor([seq]), use_cache=False).logits[0, -1]
        top = torch.topk(logits, 2)
        gaps.append(float(top.values[0] - top.values[1]))
        seq.append(int(top.indices[0]))
    return seq[len(ids):], gaps


def make_expected(model, hf_tok, name: str) -> tuple[dict, dict]:
    cfg = model.config
    L, H, V = cfg.num_hidden_layers, cfg.hidden_size, cfg.vocab_size
    tensors: dict[str, torch.Tensor] = {}
    desc: dict[str, dict] = {}

    def put(key, t, what):
        t = t.detach().contiguous()
        t = t.to(torch.int64) if not t.is_floating_point() else t.to(torch.float32)
        tensors[key] = t
        desc[key] = {"shape": list(t.shape), "dtype": str(t.dtype).replace("torch.", ""), "description": what}

    rot = model.model.rotary_emb
    put("rope.inv_freq", rot.inv_freq, "RoPE inverse frequencies [head_dim/2] as transformers computes them "
        "(YaRN-blended for rope_type yarn); cos/sin are additionally multiplied by rope.attention_scaling")

    # --- prompts ---
    chat_text = hf_tok.apply_chat_template(CHAT_PROMPT_MESSAGES, tokenize=False, add_generation_prompt=True)
    prompts = [
        ("plain", PLAIN_PROMPT, None),
        ("chat", chat_text, CHAT_PROMPT_MESSAGES),
        ("long", LONG_PROMPT, None),
    ]
    prompt_meta, prompt_ids = [], []
    for i, (kind, text, msgs) in enumerate(prompts):
        ids = hf_tok(text, add_special_tokens=False)["input_ids"]
        if kind == "chat":
            assert ids == hf_tok.apply_chat_template(msgs, tokenize=True, add_generation_prompt=True,
                                                     return_dict=False), "chat ids mismatch"
        if kind == "long":
            assert len(ids) >= 100, len(ids)
        prompt_ids.append(ids)
        T = len(ids)
        logits, hs, last_raw = forward_full(model, ids)
        final = model.model.norm(last_raw)
        assert torch.equal(hs[-1], final), "hidden_states[-1] is expected to be the final-norm output"
        assert torch.allclose(hs[0], model.model.embed_tokens(torch.tensor(ids))), "hidden_states[0] != embeddings"
        assert torch.allclose(model.lm_head(final), logits, atol=1e-6)
        put(f"prompt{i}.input_ids", torch.tensor(ids), f"token ids of the {kind} prompt [T={T}]")
        put(f"prompt{i}.logits", logits, "logits of a full causal forward, no cache [T, V]")
        put(f"prompt{i}.hidden_states", hs, "torch.stack(output_hidden_states) [L+1, T, H]: entry 0 = embedding "
            "output; entry k (1<=k<L) = output of decoder layer k-1; entry L = FINAL-NORM output (not the raw "
            "output of the last decoder layer)")
        put(f"prompt{i}.final_hidden", final, "final RMSNorm output [T, H] (= hidden_states[L]); logits = this @ "
            "lm_head.weight^T")
        put(f"prompt{i}.last_layer_prenorm", last_raw, "raw output of the last decoder layer, before the final "
            "norm [T, H] (NOT in hidden_states)")
        prompt_meta.append({"index": i, "kind": kind, "text": text, "messages": msgs, "num_tokens": T,
                            "chat_template_kwargs": {"add_generation_prompt": True} if msgs else None})

    # --- tree verify ---
    rng = np.random.default_rng(2024)
    tree_specs = [  # (kind, N, prefix source, prefix length)
        ("chain", 8, 0, len(prompt_ids[0])),
        ("bushy", 18, 2, 70),  # P + depth > 64 = YaRN original_max_position_embeddings
        ("random", 10, 1, len(prompt_ids[1])),
        ("root_only", 1, 0, 5),
    ]
    tree_meta = []
    for j, (kind, n, src, plen) in enumerate(tree_specs):
        prefix = prompt_ids[src][:plen]
        tokens, parents, depths = random_tree(kind, n, rng, BPE_SIZE)
        P = len(prefix)
        logits, hs, mask = tree_verify(model, prefix, tokens, parents, depths)
        path_logits = []
        for i in range(n):
            path = ancestors(parents, i)
            seq = prefix + [tokens[a] for a in path]
            path_logits.append(model(torch.tensor([seq]), use_cache=False).logits[0, -1])
        path_logits = torch.stack(path_logits)
        err = float((logits - path_logits).abs().max())
        print(f"  [{name}] tree{j} ({kind}, P={P}, N={n}): max |tree - path| = {err:.3e}")
        assert err <= TREE_TOL, f"tree/path mismatch {err}"
        put(f"tree{j}.prefix_ids", torch.tensor(prefix), f"committed prefix [P={P}], prefilled into a DynamicCache "
            "with position_ids 0..P-1")
        put(f"tree{j}.tree_ids", torch.tensor(tokens), f"tree tokens [N={n}], node 0 = root (the bonus token)")
        put(f"tree{j}.parents", torch.tensor(parents), "parent node index [N]; -1 for the root; parent < child")
        put(f"tree{j}.depths", torch.tensor(depths), "depth [N]; root 0")
        put(f"tree{j}.position_ids", torch.tensor([P + d for d in depths]), "explicit position ids [N] = P + depth")
        put(f"tree{j}.logits", logits, "logits [N, V] of ONE forward over the N tree tokens on top of the prefix "
            "cache, 4-D additive mask [1,1,N,P+N] (0 = visible: whole prefix, ancestors, self; finfo(float32).min "
            "elsewhere) and explicit position_ids")
        put(f"tree{j}.hidden_states", hs, "output_hidden_states of the tree-verify forward, stacked [L+1, N, H] "
            "(same semantics as prompt*.hidden_states)")
        put(f"tree{j}.path_logits", path_logits, "row n = last-position logits of a plain causal forward (no cache) "
            "over prefix + ancestor path root..n [N, V]")
        tree_meta.append({"index": j, "kind": kind, "prefix_len": P, "num_nodes": n,
                          "prefix_source": f"prompt{src}.input_ids[:{P}]", "max_depth": max(depths),
                          "max_position_id": P + max(depths), "max_abs_err_tree_vs_path": err,
                          "mask_dtype": str(mask.dtype), "mask_fill": float(torch.finfo(mask.dtype).min)})

    # --- greedy ---
    eos_ids = [token_id("<|im_end|>"), token_id("<|endoftext|>")]
    greedy_meta = []
    for k, src in enumerate([0, 1]):
        ids = prompt_ids[src]
        # transformers 5.17 fills a passed GenerationConfig's None fields (eos_token_id=None included) from
        # model.generation_config, so eos is disabled by swapping the model's own config for the call.
        saved_gc = model.generation_config
        model.generation_config = GenerationConfig(pad_token_id=token_id("<|endoftext|>"))
        try:
            out = model.generate(torch.tensor([ids]), do_sample=False, max_new_tokens=GREEDY_NEW_TOKENS,
                                 attention_mask=torch.ones(1, len(ids), dtype=torch.long))
        finally:
            model.generation_config = saved_gc
        new = out[0, len(ids):].tolist()
        assert len(new) == GREEDY_NEW_TOKENS, len(new)
        manual, gaps = greedy_manual(model, ids, GREEDY_NEW_TOKENS)
        assert manual == new, (manual, new)
        first_eos = next((s for s, t in enumerate(new) if t in eos_ids), None)
        put(f"greedy{k}.prompt_ids", torch.tensor(ids), f"= prompt{src}.input_ids")
        put(f"greedy{k}.output_ids", torch.tensor(new), f"{GREEDY_NEW_TOKENS} new tokens of generate(do_sample="
            "False), eos disabled")
        greedy_meta.append({"index": k, "prompt_source": f"prompt{src}", "max_new_tokens": GREEDY_NEW_TOKENS,
                            "eos_token_ids": eos_ids, "eos_disabled": True, "first_eos_step": first_eos,
                            "eos_would_have_stopped": first_eos is not None,
                            "min_top1_top2_logit_gap": min(gaps),
                            "generate_equals_manual_argmax_loop": True})

    meta = {
        "model": name,
        "generated_by": "tools/make_qwen3_fixtures.py",
        "versions": versions(),
        "dtype": "float32",
        "attn_implementation": "eager",
        "config": {k: getattr(cfg, k) for k in (
            "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
            "num_key_value_heads", "head_dim", "rms_norm_eps", "max_position_embeddings", "tie_word_embeddings",
            "rope_parameters")},
        "rope": {"rope_type": cfg.rope_parameters["rope_type"], "attention_scaling": float(rot.attention_scaling),
                 "inv_freq_tensor": "rope.inv_freq",
                 "note": "cos = cos(pos * inv_freq) * attention_scaling, sin likewise (rotate_half layout: the two "
                         "halves of head_dim, not interleaved pairs); applied to q and k after q_norm/k_norm"},
        "hidden_states_semantics": {
            "num_entries": L + 1,
            "entry_0": "embedding output (input of decoder layer 0)",
            "entry_k_for_1_to_L-1": "output of decoder layer k-1 (residual stream, un-normalised)",
            "entry_L": "output of the FINAL RMSNorm (transformers 5.17 capture_outputs replaces the last captured "
                       "layer output with last_hidden_state); the raw last-layer output is prompt*.last_layer_prenorm",
            "final_hidden": "prompt*.final_hidden == hidden_states[L] exactly",
        },
        "tree_mask": {
            "shape": "[1, 1, N, P + N]", "dtype": "float32 (the model dtype)", "visible": 0.0,
            "masked": float(torch.finfo(torch.float32).min),
            "how_passed": "attention_mask=<4-D float tensor>, position_ids=[[P + depth]], past_key_values="
                          "DynamicCache holding the P prefix tokens; transformers uses a 4-D mask as-is "
                          "(eager adds it to the scaled scores)",
        },
        "tolerances": {"tree_vs_path_asserted": TREE_TOL, "f32_suggested_relative": 1e-4},
        "prompts": prompt_meta,
        "trees": tree_meta,
        "greedy": greedy_meta,
        "tensors": desc,
    }
    return tensors, meta


def versions() -> dict:
    return {"python": sys.version.split()[0], "torch": torch.__version__, "transformers": transformers.__version__,
            "tokenizers": tokenizers.__version__, "safetensors": safetensors.__version__, "numpy": np.__version__}


def write_expected(out: Path, tensors: dict, meta: dict) -> None:
    save_file(tensors, str(out / "expected.safetensors"), metadata={"generated_by": "tools/make_qwen3_fixtures.py"})
    (out / "expected.json").write_text(json.dumps(meta, indent=2, ensure_ascii=False) + "\n")


def reload_check(out: Path, ref_model, tensors: dict) -> None:
    """Reload with from_pretrained, compare every parameter and re-check one logit row."""
    m = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32, attn_implementation="eager").eval()
    ref_sd, sd = ref_model.state_dict(), m.state_dict()
    assert ref_sd.keys() == sd.keys()
    for k in ref_sd:
        assert torch.equal(ref_sd[k], sd[k]), k
    ids = tensors["prompt2.input_ids"].tolist()
    row = m(torch.tensor([ids]), use_cache=False).logits[0, -1]
    err = float((row - tensors["prompt2.logits"][-1]).abs().max())
    assert err < 1e-5, err
    print(f"  reload {out.name}: parameters identical, last logit row max err {err:.1e}")


def main() -> None:
    for k, v in PINNED.items():
        have = {"torch": torch.__version__, "transformers": transformers.__version__,
                "tokenizers": tokenizers.__version__}[k]
        if not have.startswith(v):
            warnings.warn(f"{k} {have} != the pinned {v}; outputs may differ from the committed fixtures")
    torch.set_grad_enabled(False)
    torch.use_deterministic_algorithms(True)
    FIX.mkdir(exist_ok=True)

    print("tokenizer ...")
    if TOK_DIR.exists():
        shutil.rmtree(TOK_DIR)
    write_tokenizer(TOK_DIR)
    hf_tok = AutoTokenizer.from_pretrained(TOK_DIR)
    check_tokenizer(TOK_DIR, hf_tok)
    write_chat_goldens(TOK_DIR, hf_tok)

    for name, spec in MODELS.items():
        print(f"{name} ...")
        model = build_model(name)
        out = FIX / name
        save_model(model, out, spec["shard"])
        tensors, meta = make_expected(model, hf_tok, name)
        write_expected(out, tensors, meta)
        reload_check(out, model, tensors)
        if name == SINGLE_COPY[0]:
            single = FIX / SINGLE_COPY[1]
            save_model(model, single, None)
            meta_single = dict(meta, model=SINGLE_COPY[1],
                               note=f"same weights, config and expected outputs as {SINGLE_COPY[0]}, saved as one file")
            write_expected(single, tensors, meta_single)
            reload_check(single, model, tensors)
            a = load_file(str(single / "model.safetensors"))
            idx = json.loads((out / "model.safetensors.index.json").read_text())
            b = {}
            for shard in sorted(set(idx["weight_map"].values())):
                b.update(load_file(str(out / shard)))
            assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), "sharded != single"
            print(f"  {SINGLE_COPY[1]}: {len(a)} tensors identical to the {len(set(idx['weight_map'].values()))} shards")
    print("done")


if __name__ == "__main__":
    main()
