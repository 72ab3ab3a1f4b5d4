"""Starts the real `ddtree-server` binary (CPU) for the conformance suite.

Two models: the default one (no model flags: the trained demo pair in `models/demo/`, a small
code model), which the smoke, chat and model tests use, and the tiny random-weight fixtures
(`--target fixtures/qwen3-tiny-tied --draft fixtures/dflash-tiny`: 512-token context, 1024-token
vocabulary), which keep the mechanics tests (errors, auth, load, cancellation, stop strings, ...)
fast and are the model several of them are written against.

The binary is `$DDTREE_SERVER_BIN` if set, else `target/release/ddtree-server` after
`cargo build --release -p ddtree-server`. Every server listens on a free loopback port and is
stopped (by its own process handle) when its fixture ends.
"""

import os
import socket
import subprocess
import time
from pathlib import Path

import httpx
import openai
import pytest

ROOT = Path(__file__).resolve().parents[2]
API_KEY = "test-key-123"

# The model id the default server reports: the demo target directory's name (models/demo/target).
DEFAULT_MODEL = "target"
# The tiny random-weight fixtures, and the id they are served under.
TINY = ["--target", str(ROOT / "fixtures/qwen3-tiny-tied"), "--draft", str(ROOT / "fixtures/dflash-tiny")]
TINY_MODEL = "qwen3-tiny-tied"


def server_binary() -> Path:
    env = os.environ.get("DDTREE_SERVER_BIN")
    if env:
        return Path(env)
    subprocess.run(
        ["cargo", "build", "--release", "-p", "ddtree-server"], cwd=ROOT, check=True
    )
    target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    return target / "release" / "ddtree-server"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, binary: Path, args: list[str], api_key: str | None = None):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.api_key = api_key
        cmd = [str(binary), "--host", "127.0.0.1", "--port", str(self.port), *args]
        if api_key:
            cmd += ["--api-key", api_key]
        (ROOT / "target").mkdir(exist_ok=True)
        self.log = open(ROOT / "target" / f"server-test-{self.port}.log", "w")
        env = {k: v for k, v in os.environ.items() if k != "DDTREE_API_KEY"}
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + 120
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}: {cmd}")
            try:
                if httpx.get(self.url + "/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("server did not become healthy in 120 s")
            time.sleep(0.1)

    def headers(self) -> dict:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def client(self, **kw) -> openai.OpenAI:
        return openai.OpenAI(
            base_url=self.url + "/v1", api_key=self.api_key or "unused", max_retries=0, **kw
        )

    def http(self, **kw) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers=self.headers(), timeout=60, **kw)

    def metrics(self) -> dict:
        """Parses /metrics into {'name{labels}': value}."""
        text = httpx.get(self.url + "/metrics", headers=self.headers(), timeout=10).text
        out = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                out[name] = float(value)
        return out

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


@pytest.fixture(scope="session")
def binary() -> Path:
    return server_binary()


def _serve(binary, args, api_key=None):
    server = Server(binary, args, api_key)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def server(binary):
    """The default server, started with no model flags: the demo pair, no API key."""
    yield from _serve(binary, [])


@pytest.fixture(scope="session")
def tiny_server(binary):
    """The tiny random-weight fixtures, no API key."""
    yield from _serve(binary, TINY)


@pytest.fixture(scope="session")
def keyed_server(binary):
    """The tiny fixtures behind API_KEY."""
    yield from _serve(binary, TINY, api_key=API_KEY)


@pytest.fixture(scope="session")
def small_queue_server(binary):
    """The tiny fixtures, letting one request wait behind the running one."""
    yield from _serve(binary, [*TINY, "--max-queue", "1"])


@pytest.fixture(scope="session")
def long_server(binary):
    """The tiny fixtures with a long context, for requests that run long enough to cancel."""
    yield from _serve(binary, [*TINY, "--max-context", "4096"])


@pytest.fixture(scope="session")
def think_server(binary):
    """The tiny fixtures with a chat template that opens <think> in the prompt (Qwen3.5 style)."""
    yield from _serve(binary, [*TINY, "--chat-template", str(Path(__file__).parent / "think_open.jinja")])


@pytest.fixture(scope="session")
def client(server) -> openai.OpenAI:
    return server.client()


def chat_body(content="Say hello in one short sentence.", **kw) -> dict:
    """A greedy chat body. It names no `model` (the server accepts that), so it suits every
    server; pass `model=` to send one."""
    body = {
        "messages": [{"role": "user", "content": content}],
        "max_tokens": 24,
        "temperature": 0,
    }
    body.update(kw)
    return body


def sse_events(response: httpx.Response) -> tuple[list[str], list[dict]]:
    """Reads an event stream; returns the raw lines and the decoded JSON events."""
    import json

    lines = list(response.iter_lines())
    events = [json.loads(l[len("data: "):]) for l in lines if l.startswith("data: {")]
    return lines, events
