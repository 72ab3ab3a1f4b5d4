"""Chat and text completions against the real server: shapes, streaming, parameters, the
`ddtree` object, stop strings, reasoning and lossless greedy output across modes.

`server` / `client` are the default server (no model flags: the trained demo code model);
`tiny_server` is the tiny random-weight fixtures, for the mechanics tests that send many requests.
"""

import json
import keyword
import re

import httpx
import openai
import pytest

from conftest import DEFAULT_MODEL, TINY_MODEL, chat_body, sse_events

PROMPT = "Say hello in one short sentence."
CODE_PROMPT = "Write a Python function that reverses a string"


def check_ddtree(d: dict, completion_tokens: int, budget: int | None = None):
    for key in [
        "mode", "block_size", "tree_budget", "decode_rounds", "mean_acceptance_length",
        "output_tokens", "tokens_per_second", "num_draft_tokens", "num_accepted_draft_tokens",
        "acceptance_histogram", "queue_ms", "ttft_ms", "decode_ms", "sampling",
    ]:
        assert key in d, key
    assert d["block_size"] == 16
    assert d["output_tokens"] == completion_tokens
    hist = d["acceptance_histogram"]
    assert sum(hist) == d["decode_rounds"]
    committed = sum(tau * n for tau, n in enumerate(hist))
    assert d["num_accepted_draft_tokens"] == committed - d["decode_rounds"]
    if d["decode_rounds"]:
        assert d["mean_acceptance_length"] == pytest.approx(committed / d["decode_rounds"])
        assert d["mean_acceptance_length"] >= 1
    # One token from the prefill, then every round's tokens, truncated at the end.
    assert d["output_tokens"] <= 1 + committed
    assert d["ttft_ms"] >= d["queue_ms"] >= 0
    if budget is not None:
        assert d["tree_budget"] == budget
        assert d["num_draft_tokens"] == budget * d["decode_rounds"]


def test_non_stream_shape_with_the_openai_client(client):
    r = client.chat.completions.create(
        model=DEFAULT_MODEL,
        messages=[{"role": "user", "content": CODE_PROMPT}],
        max_tokens=24,
        temperature=0,
        extra_body={"tree_budget": 16},
    )
    assert r.id.startswith("chatcmpl-")
    assert r.object == "chat.completion"
    assert r.model == DEFAULT_MODEL
    assert r.system_fingerprint
    assert len(r.choices) == 1
    choice = r.choices[0]
    assert choice.index == 0
    assert choice.message.role == "assistant"
    assert isinstance(choice.message.content, str)
    assert choice.finish_reason in ("stop", "length")
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    assert 1 <= r.usage.completion_tokens <= 24
    if choice.finish_reason == "length":
        assert r.usage.completion_tokens == 24
    # Extension fields are reachable as attributes.
    check_ddtree(r.ddtree, r.usage.completion_tokens, budget=16)
    assert r.ddtree["mode"] == "tree"
    spec = r.metrics["speculative_decoding"]
    assert spec["num_draft_tokens"] == r.ddtree["num_draft_tokens"]


def test_stream_shape_include_usage_and_done(server):
    body = chat_body(CODE_PROMPT, stream=True, stream_options={"include_usage": True})
    with server.http() as http, http.stream("POST", "/v1/chat/completions", json=body) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        lines, events = sse_events(r)
    nonblank = [l for l in lines if l]
    assert all(l.startswith("data: ") for l in nonblank), nonblank
    assert nonblank[-1] == "data: [DONE]"
    assert "data:" not in [l.strip() for l in lines]
    first, *middle, finish, usage = events
    assert first["choices"][0]["delta"]["role"] == "assistant"
    assert all("role" not in e["choices"][0]["delta"] for e in middle + [finish])
    assert len({(e["id"], e["created"], e["model"]) for e in events}) == 1
    assert all(e["object"] == "chat.completion.chunk" for e in events)
    reasons = [c["finish_reason"] for e in events for c in e["choices"] if c["finish_reason"]]
    assert reasons == [finish["choices"][0]["finish_reason"]]
    assert all(e["usage"] is None for e in events[:-1])
    assert usage["choices"] == []
    u = usage["usage"]
    assert u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"]
    check_ddtree(usage["ddtree"], u["completion_tokens"], budget=16)
    assert "ddtree" not in finish


def test_stream_without_include_usage_puts_ddtree_on_the_finish_chunk(server):
    body = chat_body(CODE_PROMPT, stream=True)
    with server.http() as http, http.stream("POST", "/v1/chat/completions", json=body) as r:
        lines, events = sse_events(r)
    assert lines[-1] == "data: [DONE]" or [l for l in lines if l][-1] == "data: [DONE]"
    assert all("usage" not in e for e in events)
    assert events[-1]["choices"][0]["finish_reason"] in ("stop", "length")
    assert "ddtree" in events[-1]


@pytest.mark.parametrize("budget", [0, 4, 16, "chain"])
def test_stream_concatenates_to_the_non_stream_text(tiny_server, budget):
    """On the random-weight model, whose text is a hard case for the streaming detokenizer."""
    client = tiny_server.client()
    messages = [{"role": "user", "content": "Tell me a story about a robot."}]
    kw = dict(model=TINY_MODEL, messages=messages, max_tokens=40, temperature=0,
              extra_body={"tree_budget": budget, "ignore_eos": True})
    whole = client.chat.completions.create(**kw)
    chunks = list(client.chat.completions.create(stream=True, **kw))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    assert whole.usage.completion_tokens == 40
    assert whole.choices[0].finish_reason == "length"
    expected_mode = {0: "autoregressive", "chain": "chain"}.get(budget, "tree")
    assert whole.ddtree["mode"] == expected_mode
    assert whole.ddtree["tree_budget"] == {0: 0, "chain": 15}.get(budget, budget)


@pytest.mark.parametrize("which,prompts", [
    # The trained pair: long accepted paths, deep trees.
    ("server", [CODE_PROMPT]),
    # Random weights: drafts are nearly always rejected.
    ("tiny_server", ["Hello", "What is 2+2?", "Write a haiku about the sea."]),
])
def test_greedy_output_is_the_same_in_every_mode(request, which, prompts):
    """Lossless: DDTree, DFlash chain and autoregressive decoding emit the same tokens."""
    server = request.getfixturevalue(which)
    with server.http() as http:
        for prompt in prompts:
            texts = set()
            for budget in [0, 1, 3, 16, 64, "chain"]:
                r = http.post("/v1/chat/completions", json=chat_body(
                    prompt, max_tokens=32, tree_budget=budget, ignore_eos=True)).json()
                texts.add(r["choices"][0]["message"]["content"])
            assert len(texts) == 1, (prompt, texts)


def test_max_tokens_and_max_completion_tokens_are_both_honoured(tiny_server):
    with tiny_server.http() as http:
        for field in ["max_tokens", "max_completion_tokens"]:
            body = chat_body(ignore_eos=True)
            del body["max_tokens"]
            body[field] = 7
            r = http.post("/v1/chat/completions", json=body).json()
            assert r["usage"]["completion_tokens"] == 7, field
            assert r["choices"][0]["finish_reason"] == "length"
        same = http.post("/v1/chat/completions", json=chat_body(
            max_tokens=5, max_completion_tokens=5, ignore_eos=True)).json()
        assert same["usage"]["completion_tokens"] == 5


def test_stop_strings_cut_the_text_streamed_or_not(tiny_server):
    with tiny_server.http() as http:
        full = http.post("/v1/chat/completions", json=chat_body(
            max_tokens=60, ignore_eos=True)).json()["choices"][0]["message"]["content"]
        # A short ASCII piece from the middle of the greedy output.
        start = next(i for i in range(8, len(full) - 3)
                     if full[i:i + 3].isascii() and full[i:i + 3].strip() == full[i:i + 3])
        stop = full[start:start + 3]
        cut = full.index(stop)
        r = http.post("/v1/chat/completions", json=chat_body(
            max_tokens=60, ignore_eos=True, stop=[stop, "\x00never"])).json()
        assert r["choices"][0]["message"]["content"] == full[:cut]
        assert r["choices"][0]["finish_reason"] == "stop"
        assert r["usage"]["completion_tokens"] < 60
        assert r["ddtree"]["output_tokens"] == r["usage"]["completion_tokens"]
        with http.stream("POST", "/v1/chat/completions", json=chat_body(
                max_tokens=60, ignore_eos=True, stop=stop, stream=True)) as s:
            _, events = sse_events(s)
        text = "".join(e["choices"][0]["delta"].get("content", "") for e in events if e["choices"])
        assert text == full[:cut]
        assert events[-1]["choices"][0]["finish_reason"] == "stop"


def test_seeded_sampling_is_reproducible(tiny_server):
    with tiny_server.http() as http:
        def run(seed):
            return http.post("/v1/chat/completions", json=chat_body(
                temperature=1.0, top_p=0.9, top_k=50, seed=seed, ignore_eos=True)).json()
        a, b, c = run(7), run(7), run(8)
    assert a["choices"][0]["message"]["content"] == b["choices"][0]["message"]["content"]
    assert a["ddtree"]["sampling"] == {"temperature": 1.0, "top_p": pytest.approx(0.9), "top_k": 50, "seed": 7}
    assert c["ddtree"]["sampling"]["seed"] == 8
    assert a["choices"][0]["message"]["content"] != c["choices"][0]["message"]["content"]


def test_reasoning_split_when_the_prompt_opens_think(think_server):
    with think_server.http() as http:
        r = http.post("/v1/chat/completions", json=chat_body(max_tokens=12, ignore_eos=True)).json()
        raw = http.post("/v1/chat/completions", json=chat_body(
            max_tokens=12, ignore_eos=True, separate_reasoning=False)).json()
        rendered = http.post("/v1/chat/completions/render", json=chat_body()).json()
    assert rendered["prompt"].endswith("<|im_start|>assistant\n<think>\n")
    assert rendered["reasoning_starts_open"] is True
    msg = r["choices"][0]["message"]
    text = raw["choices"][0]["message"]["content"]
    if "</think>" in text:
        before, after = text.split("</think>", 1)
        assert msg["reasoning_content"] == before and msg["content"] == after
    else:
        # Cut before </think>: everything is reasoning (not content).
        assert msg["reasoning_content"] == text
        assert msg["reasoning"] == text
        assert msg["content"] == ""
        assert r["usage"]["completion_tokens_details"]["reasoning_tokens"] == 12
    assert raw["choices"][0]["message"]["reasoning_content"] is None


def test_enable_thinking_reaches_the_template(server):
    with server.http() as http:
        on = http.post("/v1/chat/completions/render", json=chat_body()).json()
        off = http.post("/v1/chat/completions/render", json=chat_body(
            chat_template_kwargs={"enable_thinking": False})).json()
        effort = http.post("/v1/chat/completions/render", json=chat_body(reasoning_effort="none")).json()
    assert on["prompt"].endswith("<|im_start|>assistant\n")
    assert off["prompt"].endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert effort["prompt"] == off["prompt"]
    assert len(off["prompt_token_ids"]) > len(on["prompt_token_ids"])


def test_text_completions(server):
    client = server.client()
    r = client.completions.create(model=DEFAULT_MODEL, prompt="def main():", max_tokens=10,
                                  temperature=0, extra_body={"ignore_eos": True})
    assert r.object == "text_completion"
    assert r.id.startswith("cmpl-")
    assert r.usage.completion_tokens == 10
    chunks = list(client.completions.create(model=DEFAULT_MODEL, prompt="def main():", max_tokens=10,
                                            temperature=0, stream=True, extra_body={"ignore_eos": True}))
    assert "".join(c.choices[0].text for c in chunks if c.choices) == r.choices[0].text
    ids = client.completions.create(model=DEFAULT_MODEL, prompt=[1, 2, 3], max_tokens=3, temperature=0)
    assert ids.usage.prompt_tokens == 3


def test_models_health_and_metrics(server):
    client = server.client()
    models = client.models.list()
    assert [m.id for m in models.data] == [DEFAULT_MODEL]
    assert models.data[0].max_model_len == 4096  # the demo target's max_position_embeddings
    assert client.models.retrieve(DEFAULT_MODEL).id == DEFAULT_MODEL
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("gpt-4o")
    assert httpx.get(server.url + "/health").json() == {"status": "ok"}
    m = server.metrics()
    for name in [
        "ddtree_spec_decode_num_drafts_total",
        "ddtree_spec_decode_num_draft_tokens_total",
        "ddtree_spec_decode_num_accepted_tokens_total",
        'ddtree_spec_decode_num_accepted_tokens_per_pos_total{position="0"}',
        "ddtree_prompt_tokens_total",
        "ddtree_generation_tokens_total",
        "ddtree_num_requests_running",
        "ddtree_num_requests_waiting",
        'ddtree_time_to_first_token_seconds_bucket{le="+Inf"}',
        "ddtree_e2e_request_latency_seconds_count",
        "ddtree_request_queue_time_seconds_count",
    ]:
        assert name in m, name


def test_metrics_reconcile_with_the_ddtree_object(server):
    before = server.metrics()
    with server.http() as http:
        d = http.post("/v1/chat/completions", json=chat_body(max_tokens=20, ignore_eos=True)).json()
    after = server.metrics()
    delta = lambda k: after.get(k, 0) - before.get(k, 0)
    assert delta("ddtree_generation_tokens_total") == d["usage"]["completion_tokens"]
    assert delta("ddtree_prompt_tokens_total") == d["usage"]["prompt_tokens"]
    assert delta("ddtree_spec_decode_num_draft_tokens_total") == d["ddtree"]["num_draft_tokens"]
    assert delta("ddtree_spec_decode_num_accepted_tokens_total") == d["ddtree"]["num_accepted_draft_tokens"]
    assert delta("ddtree_spec_decode_num_drafts_total") == d["ddtree"]["decode_rounds"]
    assert delta('ddtree_requests_total{status="200",finish_reason="length"}') == 1


def test_a_chat_request_for_code_gets_code_from_the_default_model(server):
    """The demo pair is a small code model: greedy output for a code request reads like Python
    source (it never saw chat data, so it writes code rather than answering)."""
    client = server.client()
    kw = dict(model=DEFAULT_MODEL, messages=[{"role": "user", "content": CODE_PROMPT}], max_tokens=64,
              temperature=0)
    r = client.chat.completions.create(**kw)
    text = r.choices[0].message.content
    assert r.usage.completion_tokens >= 32, text
    assert len(text) >= 80, text
    assert "\ufffd" not in text
    assert "<|" not in text  # no special tokens leak into the text
    printable = sum(c.isascii() and (c.isprintable() or c in "\n\t") for c in text)
    assert printable >= 0.95 * len(text), text
    assert text.count("\n") >= 3, text  # several lines
    words = set(re.findall(r"[A-Za-z_][A-Za-z_0-9]*", text))
    assert len(words & set(keyword.kwlist)) >= 2, text  # e.g. from / import / def / return
    # A trained drafter: rounds accept several tokens on average (random weights give about 1).
    assert r.ddtree["mean_acceptance_length"] >= 2, r.ddtree
    # Streamed, the same text.
    chunks = list(client.chat.completions.create(stream=True, **kw))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == text
