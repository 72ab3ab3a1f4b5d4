"""Cancellation, concurrency and the queue bound, against the real server (on the tiny fixtures,
which keep the many requests fast)."""

import threading
import time

import httpx
import pytest

from conftest import TINY_MODEL, chat_body

LONG = 4000  # tokens: far more than the few rounds a cancelled request may run


def wait_idle(server, timeout=5.0) -> float:
    """Seconds until the engine reports no running request."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        m = server.metrics()
        if m["ddtree_num_requests_running"] == 0 and m["ddtree_num_requests_waiting"] == 0:
            return time.monotonic() - start
        time.sleep(0.02)
    raise AssertionError("the engine is still busy")


def aborted(m):
    return m.get('ddtree_requests_total{status="499",finish_reason="abort"}', 0)


def check_freed(server, before):
    wait_idle(server)
    after = server.metrics()
    assert aborted(after) == aborted(before) + 1
    generated = after["ddtree_generation_tokens_total"] - before["ddtree_generation_tokens_total"]
    assert generated < LONG // 2, generated
    # A new request is served promptly.
    start = time.monotonic()
    with server.http() as http:
        r = http.post("/v1/chat/completions", json=chat_body(max_tokens=4))
    assert r.status_code == 200
    assert time.monotonic() - start < 5


def test_dropping_a_stream_frees_the_engine(long_server):
    before = long_server.metrics()
    body = chat_body(max_tokens=LONG, ignore_eos=True, stream=True)
    with long_server.http() as http, http.stream("POST", "/v1/chat/completions", json=body) as r:
        for line in r.iter_lines():
            if line.startswith("data: {") and '"content":"' in line and '"role"' not in line:
                break  # the first content chunk: go away
    check_freed(long_server, before)


def test_a_non_stream_client_timing_out_frees_the_engine(long_server):
    before = long_server.metrics()
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(long_server.url + "/v1/chat/completions",
                   json=chat_body(max_tokens=LONG, ignore_eos=True), timeout=0.5)
    check_freed(long_server, before)


def test_32_concurrent_clients_are_all_answered_correctly(tiny_server):
    server = tiny_server
    prompts = [f"Question number {i}: what is {i} + {i}?" for i in range(4)]
    with server.http() as http:
        expected = [
            http.post("/v1/chat/completions", json=chat_body(p, max_tokens=16)).json()["choices"][0]["message"]
            ["content"] for p in prompts
        ]
    results = [None] * 32
    barrier = threading.Barrier(32)

    def worker(i):
        client = server.client(timeout=120)
        barrier.wait()
        r = client.chat.completions.create(
            model=TINY_MODEL, messages=[{"role": "user", "content": prompts[i % 4]}],
            max_tokens=16, temperature=0, stream=(i % 2 == 1))
        if i % 2:
            results[i] = "".join(c.choices[0].delta.content or "" for c in r if c.choices)
        else:
            results[i] = r.choices[0].message.content

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert results == [expected[i % 4] for i in range(32)]
    wait_idle(server)


def test_a_full_queue_answers_503_with_retry_after(small_queue_server):
    """--max-queue 1: one request runs, one waits, the rest are turned away at once."""
    server = small_queue_server
    n = 8
    statuses, bodies, retry = [None] * n, [None] * n, [None] * n

    def worker(i):
        r = httpx.post(server.url + "/v1/chat/completions",
                       json=chat_body(max_tokens=300, ignore_eos=True), timeout=300)
        statuses[i], bodies[i], retry[i] = r.status_code, r.json(), r.headers.get("retry-after")

    first = threading.Thread(target=worker, args=(0,))
    first.start()
    deadline = time.monotonic() + 10
    while server.metrics()["ddtree_num_requests_running"] != 1:
        assert time.monotonic() < deadline, "the first request never started"
        time.sleep(0.005)
    rest = [threading.Thread(target=worker, args=(i,)) for i in range(1, n)]
    for t in rest:
        t.start()
    for t in [first, *rest]:
        t.join(timeout=300)
    ok = [b for s, b in zip(statuses, bodies) if s == 200]
    busy = [(b, r) for s, b, r in zip(statuses, bodies, retry) if s == 503]
    assert len(ok) == 2 and len(busy) == n - 2, statuses
    for b in ok:
        assert b["usage"]["completion_tokens"] == 300
    for b, r in busy:
        assert b["error"]["code"] == "server_busy"
        assert b["error"]["type"] == "server_busy_error"
        assert int(r) >= 1
    wait_idle(server)
    m = server.metrics()
    assert m['ddtree_requests_total{status="503",finish_reason="none"}'] == n - 2
