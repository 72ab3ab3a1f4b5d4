"""API keys: every route but /health needs one; 401 with `WWW-Authenticate: Bearer`."""

import httpx
import openai
import pytest

from conftest import API_KEY, TINY_MODEL, chat_body


def assert_401(r: httpx.Response):
    assert r.status_code == 401, r.text
    assert r.headers["www-authenticate"] == "Bearer"
    err = r.json()["error"]
    assert err["code"] == "invalid_api_key"
    assert err["type"] == "authentication_error"


@pytest.mark.parametrize("method,path", [
    ("POST", "/v1/chat/completions"),
    ("POST", "/v1/completions"),
    ("POST", "/v1/chat/completions/render"),
    ("GET", "/v1/models"),
    ("GET", f"/v1/models/{TINY_MODEL}"),
    ("GET", "/metrics"),
    ("GET", "/v1/unknown"),
])
def test_every_route_needs_the_key(keyed_server, method, path):
    url = keyed_server.url + path
    kw = {"json": chat_body()} if method == "POST" else {}
    assert_401(httpx.request(method, url, **kw))
    assert_401(httpx.request(method, url, headers={"Authorization": "Bearer wrong"}, **kw))
    assert_401(httpx.request(method, url, headers={"X-Api-Key": "wrong"}, **kw))
    assert_401(httpx.request(method, url, headers={"Authorization": f"Basic {API_KEY}"}, **kw))


def test_health_is_open(keyed_server):
    assert httpx.get(keyed_server.url + "/health").status_code == 200


def test_the_right_key_works_as_bearer_or_x_api_key(keyed_server):
    url = keyed_server.url + "/v1/chat/completions"
    for headers in [{"Authorization": f"Bearer {API_KEY}"}, {"X-Api-Key": API_KEY}]:
        r = httpx.post(url, json=chat_body(max_tokens=3), headers=headers, timeout=60)
        assert r.status_code == 200, r.text
    assert httpx.get(keyed_server.url + "/metrics", headers={"X-Api-Key": API_KEY}).status_code == 200


def test_openai_client_with_and_without_the_key(keyed_server):
    ok = keyed_server.client()
    assert ok.chat.completions.create(model=TINY_MODEL, messages=[{"role": "user", "content": "hi"}],
                                      max_tokens=2).usage.completion_tokens >= 1
    bad = openai.OpenAI(base_url=keyed_server.url + "/v1", api_key="nope", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.models.list()
