"""Every bad input of serving-anchors.md §6.3 gets its 4xx with an OpenAI error body, never a
5xx; the server stays healthy afterwards."""

import json
from pathlib import Path

import httpx
import openai
import pytest

from conftest import chat_body

ROOT = Path(__file__).resolve().parents[2]
MSG = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def server(tiny_server):
    """These cases are written against the tiny fixtures (served as `qwen3-tiny-tied`, 512-token
    context, 1024-token vocabulary), which also keep them fast."""
    return tiny_server


def error_of(r: httpx.Response, status: int, code: str | None = None, param: str | None = None) -> dict:
    assert r.status_code == status, (r.status_code, r.text)
    assert r.headers["content-type"].startswith("application/json")
    body = r.json()
    err = body["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert isinstance(err["message"], str) and err["message"]
    assert isinstance(err["code"], str)
    assert isinstance(err["type"], str)
    if code is not None:
        assert err["code"] == code, err
    if param is not None:
        assert err["param"] == param, err
    return err


def post(server, body, path="/v1/chat/completions", **kw):
    with server.http() as http:
        if isinstance(body, (bytes, str)):
            return http.post(path, content=body, headers={"Content-Type": "application/json"}, **kw)
        return http.post(path, json=body, **kw)


# (row, body, status, code, param)
BAD_BODIES = [
    ("1 invalid json", b"{\"messages\": [", 400, "invalid_json", "body"),
    ("2 array body", b"[1, 2]", 400, "invalid_body", "body"),
    ("2 string body", b"\"hello\"", 400, "invalid_body", "body"),
    ("2 number body", b"42", 400, "invalid_body", "body"),
    ("2 null body", b"null", 400, "invalid_body", "body"),
    ("4 messages missing", {"model": "qwen3-tiny-tied"}, 400, "missing_required_parameter", "messages"),
    ("4 messages null", {"messages": None}, 400, "missing_required_parameter", "messages"),
    ("4 messages not array", {"messages": "hi"}, 400, "invalid_type", "messages"),
    ("4 messages empty", {"messages": []}, 400, "invalid_value", "messages"),
    ("5 message not object", {"messages": ["hi"]}, 400, "invalid_type", "messages[0]"),
    ("5 role missing", {"messages": [{"content": "hi"}]}, 400, "missing_required_parameter", "messages[0].role"),
    ("5 role not string", {"messages": [{"role": 1, "content": "hi"}]}, 400, "invalid_type", "messages[0].role"),
    ("5 role unknown", {"messages": [{"role": "wizard", "content": "hi"}]}, 400, "invalid_value", "messages[0].role"),
    ("5 content number", {"messages": [{"role": "user", "content": 5}]}, 400, "invalid_type", "messages[0].content"),
    ("5 content object", {"messages": [{"role": "user", "content": {"a": 1}}]}, 400, "invalid_type", "messages[0].content"),
    ("5 unknown part", {"messages": [{"role": "user", "content": [{"type": "magic", "text": "x"}]}]},
     400, "invalid_value", "messages[0].content[0].type"),
    ("5 image part", {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
     400, "unsupported_parameter", "messages[0].content[0].type"),
    ("8 max_tokens float", chat_body(max_tokens=1.5), 400, "invalid_type", "max_tokens"),
    ("8 max_tokens string", chat_body(max_tokens="10"), 400, "invalid_type", "max_tokens"),
    ("8 max_tokens zero", chat_body(max_tokens=0), 400, "invalid_value", "max_tokens"),
    ("8 max_tokens negative", chat_body(max_completion_tokens=-3), 400, "invalid_value", "max_completion_tokens"),
    ("8 both differ", chat_body(max_tokens=5, max_completion_tokens=6), 400, "invalid_value", "max_completion_tokens"),
    ("10 prompt + max_tokens", chat_body(max_tokens=10_000), 400, "context_length_exceeded", "max_tokens"),
    ("11 temperature high", chat_body(temperature=2.5), 400, "invalid_value", "temperature"),
    ("11 temperature negative", chat_body(temperature=-0.1), 400, "invalid_value", "temperature"),
    ("11 temperature string", chat_body(temperature="hot"), 400, "invalid_type", "temperature"),
    ("11 top_p zero", chat_body(top_p=0), 400, "invalid_value", "top_p"),
    ("11 top_p high", chat_body(top_p=1.5), 400, "invalid_value", "top_p"),
    ("11 top_k negative", chat_body(top_k=-2), 400, "invalid_value", "top_k"),
    ("11 min_p high", chat_body(min_p=1.5), 400, "invalid_value", "min_p"),
    ("12 min_p unsupported", chat_body(min_p=0.1), 400, "unsupported_parameter", "min_p"),
    ("13 presence range", chat_body(presence_penalty=3), 400, "invalid_value", "presence_penalty"),
    ("13 frequency unsupported", chat_body(frequency_penalty=0.5), 400, "unsupported_parameter", "frequency_penalty"),
    ("14 n zero", chat_body(n=0), 400, "invalid_value", "n"),
    ("14 n two", chat_body(n=2), 400, "unsupported_parameter", "n"),
    ("15 stop number", chat_body(stop=5), 400, "invalid_type", "stop"),
    ("15 stop list of numbers", chat_body(stop=["a", 1]), 400, "invalid_type", "stop[1]"),
    ("15 stop empty string", chat_body(stop=""), 400, "invalid_value", "stop"),
    ("15 too many stops", chat_body(stop=[str(i) for i in range(17)]), 400, "invalid_value", "stop"),
    ("16 stop id negative", chat_body(stop_token_ids=[-1]), 400, "invalid_value", "stop_token_ids[0]"),
    ("16 stop id past vocab", chat_body(stop_token_ids=[1024]), 400, "invalid_value", "stop_token_ids[0]"),
    ("17 seed too large", b'{"messages":[{"role":"user","content":"hi"}],"seed":18446744073709551616}',
     400, "invalid_value", "seed"),
    ("17 seed too small", b'{"messages":[{"role":"user","content":"hi"}],"seed":-9223372036854775809}',
     400, "invalid_value", "seed"),
    ("18 stream not bool", chat_body(stream="yes"), 400, "invalid_type", "stream"),
    ("18 stream_options without stream", chat_body(stream_options={"include_usage": True}),
     400, "invalid_value", "stream_options"),
    ("18 include_usage not bool", chat_body(stream=True, stream_options={"include_usage": 1}),
     400, "invalid_type", "stream_options.include_usage"),
    ("19 logprobs", chat_body(logprobs=True), 400, "unsupported_parameter", "logprobs"),
    ("19 top_logprobs", chat_body(top_logprobs=5), 400, "unsupported_parameter", "top_logprobs"),
    ("20 response_format", chat_body(response_format={"type": "json_object"}), 400, "unsupported_parameter",
     "response_format"),
    ("20 tools", chat_body(tools=[{"type": "function", "function": {"name": "f"}}]), 400, "unsupported_parameter",
     "tools"),
    ("20 tool_choice", chat_body(tool_choice="required"), 400, "unsupported_parameter", "tool_choice"),
    ("21 kwargs not object", chat_body(chat_template_kwargs=[1]), 400, "invalid_type", "chat_template_kwargs"),
    ("21 enable_thinking not bool", chat_body(chat_template_kwargs={"enable_thinking": "no"}),
     400, "invalid_type", "chat_template_kwargs.enable_thinking"),
    ("21 conflicting effort", chat_body(reasoning_effort="high", chat_template_kwargs={"enable_thinking": False}),
     400, "invalid_value", "reasoning_effort"),
    ("22 tree_budget negative", chat_body(tree_budget=-1), 400, "invalid_value", "tree_budget"),
    ("22 tree_budget too large", chat_body(tree_budget=257), 400, "invalid_value", "tree_budget"),
    ("22 tree_budget float", chat_body(tree_budget=2.5), 400, "invalid_value", "tree_budget"),
    ("22 tree_budget bad string", chat_body(tree_budget="wide"), 400, "invalid_value", "tree_budget"),
    ("22 block_size mismatch", chat_body(block_size=8), 400, "invalid_value", "block_size"),
]


@pytest.mark.parametrize("case", BAD_BODIES, ids=[c[0] for c in BAD_BODIES])
def test_bad_chat_bodies(server, case):
    _, body, status, code, param = case
    error_of(post(server, body), status, code, param)


def test_3_wrong_content_type(server):
    with server.http() as http:
        r = http.post("/v1/chat/completions", content=json.dumps(chat_body()),
                      headers={"Content-Type": "text/plain"})
        error_of(r, 415, "invalid_content_type")
        r = http.post("/v1/chat/completions", data={"messages": "x"})
        error_of(r, 415, "invalid_content_type")


def test_6_template_errors_are_400(server):
    cases = json.loads((ROOT / "fixtures/tokenizer/chat_template_errors.json").read_text())
    assert cases
    for case in cases:
        body = {"messages": case["messages"], "add_generation_prompt": case["add_generation_prompt"]}
        err = error_of(post(server, body), 400, "template_error")
        assert case["error_contains"] in err["message"]


def test_7_unknown_model_is_404(server):
    err = error_of(post(server, chat_body(model="gpt-4o")), 404, "model_not_found", "model")
    assert "qwen3-tiny-tied" in err["message"]
    with pytest.raises(openai.NotFoundError):
        server.client().chat.completions.create(model="gpt-4o", messages=MSG)


def test_9_prompt_longer_than_the_context(server):
    long = "word " * 2000
    for stream in [False, True]:
        err = error_of(post(server, chat_body(long, stream=stream)), 400, "context_length_exceeded", "messages")
        assert "maximum context length is 512 tokens" in err["message"]
    with pytest.raises(openai.BadRequestError):
        server.client().chat.completions.create(model="qwen3-tiny-tied",
                                                messages=[{"role": "user", "content": long}])


def test_23_completions_prompt_validation(server):
    for body, code, param in [
        ({"prompt": ""}, "invalid_value", "prompt"),
        ({"prompt": []}, "invalid_value", "prompt"),
        ({"prompt": [5, 99999]}, "invalid_value", "prompt[1]"),
        ({"prompt": [-1]}, "invalid_value", "prompt[0]"),
        ({"prompt": ["a", "b"]}, "unsupported_parameter", "prompt"),
        ({"prompt": "x", "echo": True}, "unsupported_parameter", "echo"),
        ({}, "missing_required_parameter", "prompt"),
    ]:
        error_of(post(server, body, path="/v1/completions"), 400, code, param)


def test_25_unknown_routes_and_methods_are_json(server):
    with server.http() as http:
        error_of(http.get("/v1/nothing"), 404, "not_found")
        error_of(http.get("/"), 404, "not_found")
        error_of(http.get("/v1/chat/completions"), 405, "method_not_allowed")
        error_of(http.delete("/v1/models"), 405, "method_not_allowed")


def test_26_body_too_large(server):
    big = json.dumps(chat_body("x" * (9 * 1024 * 1024)))
    error_of(post(server, big), 413, "payload_too_large")


def test_unknown_fields_are_ignored(server):
    r = post(server, chat_body(user="u1", metadata={"a": "b"}, store=False, vendor_extension={"x": 1}))
    assert r.status_code == 200
    assert r.json()["choices"][0]["finish_reason"] in ("stop", "length")


def test_valid_edge_values_are_accepted(server):
    for body in [
        chat_body(temperature=0, top_p=1, top_k=-1, min_p=0, n=1, presence_penalty=0, frequency_penalty=0,
                  seed=-5, stop=["\x00"], stop_token_ids=[1023], logprobs=False, tools=[], tool_choice="none",
                  response_format={"type": "text"}, tree_budget=256, block_size=16),
        {"messages": [{"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
                      {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
                      {"role": "assistant", "content": None, "reasoning_content": "hm"},
                      {"role": "user", "content": "c"}], "max_tokens": 2},
    ]:
        r = post(server, body)
        assert r.status_code == 200, r.text


def test_server_is_healthy_after_all_of_that(server):
    assert httpx.get(server.url + "/health").status_code == 200
    m = server.metrics()
    assert not any(k.startswith('ddtree_requests_total{status="5') for k in m), m
