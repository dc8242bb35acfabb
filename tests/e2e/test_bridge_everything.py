"""The bridge (a 2026-07-28 host through mcpgate to a legacy backend), against a real third-party backend.

`@modelcontextprotocol/server-everything` (2026.8.31, legacy: it answers `server/discover`
with -32601 and is initialized at 2025-11-25) over stdio behind mcpgate; the host is the
official Python SDK's `mcp.Client` (2.3), pinned to 2026-07-28 and in its default `auto` mode
(which probes `server/discover`), answering with its ordinary callbacks. When the backend asks
its client something mid-call, the gateway parks the call and answers the host
`input_required`; the SDK answers and retries, and the backend gets the host's answer as the
answer to its own request. Cases: form elicitation (`trigger-elicitation-request`), sampling
(`trigger-sampling-request`), roots (`get-roots-list`), URL elicitation
(`trigger-url-elicitation`: the request path, and the error path whose -32042 the gateway turns
into `input_required`), progress (`trigger-long-running-operation`, also across an
`input_required` round), cancel (the host abandons the call: its response stream closes), a
retry that never comes, `subscriptions/listen` (`toggle-subscriber-updates`,
`gzip-file-as-resource`), and the capability gate (a kind the request did not declare is never
asked), the gate also on raw 2026-07-28 HTTP, where the SDK cannot leave out one elicitation
mode.

Connection modes, and why two are used:
- The default (`mode = "auto"` for stdio): server-everything asks `roots/list` 350 ms after its
  `initialize` with no call in flight, so the gateway marks it stateful and from then on a
  2026-07-28 request takes a pooled backend session keyed by (principal, declared client
  capabilities), initialized with exactly those capabilities (server-everything then registers
  only the tools those capabilities allow). The fixture waits for that mark (`/readyz`).
- `mode = "shared"`: one backend session, declaring everything the gateway relays, so the backend
  does ask for kinds a request did not declare (the gateway's own gate refuses them), and the tools
  that trigger resource updates and list changes run in the same process that feeds the listen.
  server-everything keeps that state per process: in the default mode those tools run in a pooled
  child the listen does not watch, and no event comes.

What mcpgate writes to each server-everything process and what it answers are recorded by a
`tee` on each side (one file pair per process: the gateway starts several).
"""

from __future__ import annotations

import json
import shlex
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client, types
from mcp.client.subscriptions import ResourcesListChanged, ResourceUpdated
from prometheus_client.parser import text_string_to_metric_families

import support
from support import Gateway, StartGateway, StdioCommand

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

MODERN = "2026-07-28"
ENVELOPE = ("io.modelcontextprotocol/protocolVersion", "io.modelcontextprotocol/clientCapabilities",
            "io.modelcontextprotocol/clientInfo", "io.modelcontextprotocol/logLevel")
ALL_CAPS = {"elicitation": {"form": {}, "url": {}}, "sampling": {}, "roots": {"listChanged": True}}
STATIC_DOC = "demo://resource/static/document/architecture.md"


# --------------------------------------------------------------------------- the gateway and its backend


class Bridged:
    """A gateway in front of server-everything, with the record of every backend process."""

    def __init__(self, gateway: Gateway, metrics_url: str, logs: Path) -> None:
        self.gateway = gateway
        self.url = gateway.url
        self.metrics_url = metrics_url
        self.logs = logs

    def children(self) -> dict[str, tuple[list[dict[str, Any]], list[dict[str, Any]]]]:
        """Per backend process (by its record's name): (what mcpgate wrote to it, what it wrote back)."""
        out = {}
        for sent in sorted(self.logs.glob("*.in")):
            answered = sent.with_suffix(".out")
            out[sent.stem] = (_lines(sent), _lines(answered) if answered.exists() else [])
        return out

    def calls_to(self, tool: str) -> list[tuple[str, dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]]:
        """Each `tools/call` of `tool` a backend process got: (process, request, its input, its output)."""
        return [(child, m, sent, answered) for child, (sent, answered) in self.children().items() for m in sent
                if m.get("method") == "tools/call" and m["params"]["name"] == tool]

    async def settle(self, client: Client) -> None:
        """Lets server-everything's startup ask pass before a test counts asks.

        A new server-everything process asks `roots/list` from a timer 350 ms after its
        `initialize` (when the client declared roots), for no call. On a pooled backend
        session that ask reaches whichever call is in flight on it then (a stdio pipe
        cannot say which call a request belongs to), else the gateway refuses it. A quick
        call opens the host's backend session; then this waits for that refusal.
        """
        done = await client.call_tool("ev__echo", {"message": "settle"})
        assert texts(done) == "Echo: settle", done
        [(child, _, _, _)] = self.calls_to("echo")
        with anyio.fail_after(10):
            while True:
                sent, answered = self.children()[child]
                asks = [m["id"] for m in answered if m.get("method") == "roots/list"]
                replies = [m for m in sent if "method" not in m and m.get("id") in asks]
                if replies:
                    assert all("error" in m for m in replies), replies
                    return
                await anyio.sleep(0.05)

    def metric(self, name: str, **labels: str) -> float:
        with urllib.request.urlopen(self.metrics_url, timeout=5) as r:
            text = r.read().decode()
        total = 0.0
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                    total += s.value
        return total


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _start(start_gateway: StartGateway, everything: StdioCommand, tmp_path: Path, mode: str | None,
           **server: Any) -> Bridged:
    logs = tmp_path / "backend"
    logs.mkdir()
    inner = " ".join(shlex.quote(a) for a in [everything.command, *everything.args])
    record = (f"f=$(mktemp -p {shlex.quote(str(logs))} child.XXXXXX) && "
              f'tee "$f.in" | {inner} | tee "$f.out"')
    backend: dict[str, Any] = {"type": "stdio", "command": "/bin/sh", "args": ["-c", record]}
    if mode is not None:
        backend["mode"] = mode
    metrics = f"127.0.0.1:{support.free_port()}"
    gateway = start_gateway(support.gateway_toml({"ev": backend}, {"path": "/mcp", "metrics_listen": metrics,
                                                                   **server}))
    return Bridged(gateway, f"http://{metrics}/metrics", logs)


def _wait_stateful(bridged: Bridged) -> None:
    """Until the gateway has seen server-everything ask with no call in flight (its startup `roots/list`)."""
    deadline = time.monotonic() + 15
    while True:
        try:
            with urllib.request.urlopen(bridged.gateway.base + "/readyz", timeout=5) as r:
                ready = json.loads(r.read())
        except urllib.error.HTTPError as e:  # 503 until the backend is up
            ready = json.loads(e.read())
        if ready["backends"]["ev"].get("stateful"):
            return
        assert time.monotonic() < deadline, ready
        time.sleep(0.1)


@pytest.fixture
def pooled(start_gateway: StartGateway, everything: StdioCommand, tmp_path: Path) -> Bridged:
    """The default mode, after the gateway judged server-everything stateful: pooled backend sessions."""
    bridged = _start(start_gateway, everything, tmp_path, None)
    _wait_stateful(bridged)
    return bridged


@pytest.fixture
def shared(start_gateway: StartGateway, everything: StdioCommand, tmp_path: Path) -> Bridged:
    """`mode = "shared"`: one backend session declaring everything the gateway relays."""
    return _start(start_gateway, everything, tmp_path, "shared")


# --------------------------------------------------------------------------- the host


class Host:
    """The host's SDK callbacks, recording what it was asked (with the backend's own text)."""

    def __init__(self, root: tuple[str, str] = ("file:///work/bridge", "bridge-root")) -> None:
        self.asked: list[dict[str, Any]] = []
        self.root = root

    async def elicit(self, _ctx: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked = params.model_dump(mode="json", by_alias=True, exclude_none=True)
        self.asked.append({"kind": "elicitation", **asked})
        if asked.get("mode") == "url":
            return types.ElicitResult(action="accept")
        return types.ElicitResult(action="accept", content={"name": "Ada Lovelace", "check": True, "integer": 7})

    async def sample(self, _ctx: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        content = params.messages[0].content
        self.asked.append({"kind": "sampling", "text": content.text if isinstance(content, types.TextContent) else None,
                           "systemPrompt": params.system_prompt, "maxTokens": params.max_tokens})
        return types.CreateMessageResult(role="assistant", model="host-model",
                                         content=types.TextContent(type="text", text="4, says the host"))

    async def roots(self, _ctx: Any) -> types.ListRootsResult:
        self.asked.append({"kind": "roots"})
        uri, name = self.root
        return types.ListRootsResult(roots=[types.Root(uri=uri, name=name)])

    def client(self, url: str, mode: str | None, *, elicit: bool = True, sample: bool = True,
               roots: bool = True) -> Client:
        kwargs: dict[str, Any] = {} if mode is None else {"mode": mode}
        return Client(url, **kwargs,
                      elicitation_callback=self.elicit if elicit else None,
                      sampling_callback=self.sample if sample else None,
                      list_roots_callback=self.roots if roots else None)

    def take(self) -> list[dict[str, Any]]:
        asked, self.asked = self.asked, []
        return asked


def texts(result: types.CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, types.TextContent))


def assert_clean_backend_hop(bridged: Bridged) -> None:
    """What a legacy backend gets carries none of the 2026-07-28 request fields (but the
    gateway's own `server/discover` probe of its era)."""
    for sent, _ in bridged.children().values():
        for m in sent:
            if m.get("method") == "server/discover":
                continue
            params = m.get("params") or {}
            assert not set(ENVELOPE) & set(params.get("_meta") or {}), m
            assert "inputResponses" not in params and "requestState" not in params, m


# --------------------------------------------------------------------------- the asks


@pytest.mark.parametrize("mode", [None, MODERN], ids=["sdk-default-auto", "pinned-2026-07-28"])
async def test_the_hosts_callbacks_answer_the_backends_asks(pooled: Bridged, mode: str | None) -> None:
    host = Host()
    async with host.client(pooled.url, mode) as client:
        assert client.protocol_version == MODERN
        await pooled.settle(client)

        # Form elicitation: the backend's own message and schema; the host's content reaches it.
        done = await client.call_tool("ev__trigger-elicitation-request", {})
        [asked] = host.take()
        assert asked["kind"] == "elicitation" and asked.get("mode", "form") == "form", asked
        assert asked["message"] == "Please provide inputs for the following fields:", asked
        assert asked["requestedSchema"]["required"] == ["name"], asked
        assert not done.is_error, done
        assert "✅ User provided the requested information!" in texts(done), done
        assert "- Name: Ada Lovelace\n- Agreed to terms: true\n- Favorite Integer: 7" in texts(done), done

        # Sampling: the backend's prompt, system prompt and token limit; the host's completion.
        done = await client.call_tool("ev__trigger-sampling-request", {"prompt": "2+2?", "maxTokens": 7})
        assert host.take() == [{"kind": "sampling", "text": "Resource trigger-sampling-request context: 2+2?",
                                "systemPrompt": "You are a helpful test server.", "maxTokens": 7}]
        assert not done.is_error, done
        sampled = json.loads(texts(done).removeprefix("LLM sampling result: \n"))
        assert sampled == {"model": "host-model", "role": "assistant",
                           "content": {"type": "text", "text": "4, says the host"}}, done

        # URL elicitation: the backend's URL and message, no elicitationId toward a 2026-07-28 host.
        done = await client.call_tool("ev__trigger-url-elicitation",
                                      {"url": "https://example.com/consent", "message": "Consent, please"})
        assert host.take() == [{"kind": "elicitation", "mode": "url", "url": "https://example.com/consent",
                                "message": "Consent, please"}]
        assert "✅ User completed the URL elicitation flow." in texts(done), done
        assert "URL: https://example.com/consent" in texts(done), done

        # Progress: every step of the backend's, in order, on the host's callback.
        steps: list[tuple[float, float | None]] = []

        async def progress(value: float, total: float | None, _message: str | None) -> None:
            steps.append((value, total))

        done = await client.call_tool("ev__trigger-long-running-operation", {"duration": 0.6, "steps": 3},
                                      progress_callback=progress)
        assert texts(done) == "Long running operation completed. Duration: 0.6 seconds, Steps: 3.", done
        assert steps == [(1, 3), (2, 3), (3, 3)], steps
        assert host.asked == []

        # Roots: asked during the call (the backend's startup ask had no call to go to).
        # Last: a backend session told a host's roots serves no other call afterwards.
        done = await client.call_tool("ev__get-roots-list", {})
        assert host.take() == [{"kind": "roots"}]
        assert "Current MCP Roots (1 total):\n\n1. bridge-root\n   URI: file:///work/bridge" in texts(done), done

    # The backend: one pooled session for this host, initialized with exactly what it declared;
    # each ask answered with the host's answer; nothing of the 2026-07-28 wire on this hop.
    [(child, _, sent, answered)] = pooled.calls_to("trigger-elicitation-request")
    init = next(m for m in sent if m.get("method") == "initialize")
    assert init["params"]["capabilities"] == ALL_CAPS, init
    ask = next(m for m in answered if m.get("method") == "elicitation/create")
    answer = next(m for m in sent if m.get("id") == ask["id"] and "method" not in m)
    assert answer["result"] == {"action": "accept", "content": {"name": "Ada Lovelace", "check": True, "integer": 7}}
    tools = ["echo", "trigger-sampling-request", "get-roots-list", "trigger-url-elicitation",
             "trigger-long-running-operation"]
    assert {c for t in tools for c, *_ in pooled.calls_to(t)} == {child}, "another backend session"
    assert_clean_backend_hop(pooled)


async def test_progress_goes_on_after_an_input_required_round(pooled: Bridged) -> None:
    """A call asked something midway: its progress after the retry reaches the retry.

    The first call on the host's new backend session is the long operation, so
    server-everything's startup `roots/list` (350 ms after `initialize`) lands in it: the
    gateway answers the host `input_required`, and the SDK retries with a new request and a
    new progress token. The backend's later steps belong to that request.
    """
    host = Host()
    steps: list[tuple[float, float | None]] = []

    async def progress(value: float, total: float | None, _message: str | None) -> None:
        steps.append((value, total))

    async with host.client(pooled.url, MODERN, elicit=False, sample=False) as client:
        done = await client.call_tool("ev__trigger-long-running-operation", {"duration": 1.5, "steps": 3},
                                      progress_callback=progress)
    assert texts(done) == "Long running operation completed. Duration: 1.5 seconds, Steps: 3.", done
    assert host.asked == [{"kind": "roots"}], host.asked
    assert pooled.metric("mcpgate_input_required_retries_total", kind="continuation", result="resumed") == 1
    assert steps == [(1, 3), (2, 3), (3, 3)], steps


async def test_one_hosts_roots_never_reach_another_host(pooled: Bridged) -> None:
    """server-everything keeps the roots it was told for the rest of its session. Two
    anonymous hosts declaring the same capabilities share a pooled backend key, so the
    backend session that was told the first host's roots must not serve the second: it
    is asked its own roots and never sees the first's."""
    first, second = Host(("file:///work/first", "first-root")), Host(("file:///work/second", "second-root"))
    async with first.client(pooled.url, MODERN) as client:
        await pooled.settle(client)
        done = await client.call_tool("ev__get-roots-list", {})
        assert first.take() == [{"kind": "roots"}]
        assert "1. first-root\n   URI: file:///work/first" in texts(done), done
    async with second.client(pooled.url, MODERN) as client:
        done = await client.call_tool("ev__get-roots-list", {})
    assert "first-root" not in texts(done), done
    assert "1. second-root\n   URI: file:///work/second" in texts(done), done
    assert {"kind": "roots"} in second.asked, second.asked
    children = [child for child, *_ in pooled.calls_to("get-roots-list")]
    assert len(set(children)) == 2, children


# --------------------------------------------------------------------------- what a host did not declare


async def test_an_undeclared_kind_is_never_asked_pooled(pooled: Bridged) -> None:
    """A host that declared only elicitation gets a backend session declaring only that:
    server-everything then has no sampling or roots tool for it (its own answer)."""
    host = Host()
    async with host.client(pooled.url, MODERN, sample=False, roots=False) as client:
        for tool in ("trigger-sampling-request", "get-roots-list"):
            done = await client.call_tool(f"ev__{tool}", {"prompt": "x"} if "sampling" in tool else {})
            assert done.is_error and f"Tool {tool} not found" in texts(done), done
        done = await client.call_tool("ev__trigger-elicitation-request", {})
        assert not done.is_error, done
    assert [a["kind"] for a in host.asked] == ["elicitation"], host.asked
    [(_, _, sent, _)] = pooled.calls_to("trigger-elicitation-request")
    init = next(m for m in sent if m.get("method") == "initialize")
    assert init["params"]["capabilities"] == {"elicitation": {"form": {}, "url": {}}}, init


def _raw_call(url: str, id_: int, tool: str, args: dict[str, Any], caps: dict[str, Any],
              **retry: Any) -> tuple[int, dict[str, Any]]:
    """One 2026-07-28 `tools/call` over plain HTTP: the `_meta` envelope and the standard headers."""
    meta = {"io.modelcontextprotocol/protocolVersion": MODERN, "io.modelcontextprotocol/clientCapabilities": caps,
            "io.modelcontextprotocol/clientInfo": {"name": "bridge-e2e-raw", "version": "0"}}
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
               "MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/call", "Mcp-Name": tool}
    body = {"jsonrpc": "2.0", "id": id_, "method": "tools/call",
            "params": {"name": tool, "arguments": args, "_meta": meta, **retry}}
    r = httpx2.post(url, json=body, headers=headers, timeout=20, trust_env=False)
    ctype = r.headers.get("content-type", "")
    if ctype.startswith("application/json"):
        messages = [r.json()]
    else:
        assert ctype.startswith("text/event-stream"), (r.status_code, ctype, r.text)
        messages = [json.loads(line[5:]) for line in r.text.splitlines()
                    if line.startswith("data:") and line[5:].strip()]
    [answer] = [m for m in messages if m.get("id") == id_]
    assert not [m for m in messages if "method" in m and "id" in m], messages  # never a request on a modern stream
    return r.status_code, answer


async def test_the_gateway_refuses_what_a_request_did_not_declare(shared: Bridged) -> None:
    """On a shared backend session (declaring everything), the backend does ask; the gateway
    answers it an error instead of putting an undeclared kind in `inputRequests`."""
    refused = "not declared in this request's capabilities"
    # URL elicitation for a host that declared only form mode.
    status, answer = _raw_call(shared.url, 1, "ev__trigger-url-elicitation", {"url": "https://example.com/x"},
                               {"elicitation": {"form": {}}})
    result = answer["result"]
    assert status == 200 and result["resultType"] == "complete" and result["isError"], answer
    assert refused in result["content"][0]["text"], answer
    # Sampling for a host that declared nothing.
    _, answer = _raw_call(shared.url, 2, "ev__trigger-sampling-request", {"prompt": "p"}, {})
    assert answer["result"]["resultType"] == "complete" and answer["result"]["isError"], answer
    assert refused in answer["result"]["content"][0]["text"], answer
    # Roots for a host that declared sampling only: the backend carries on without them.
    _, answer = _raw_call(shared.url, 3, "ev__get-roots-list", {}, {"sampling": {}})
    assert answer["result"]["content"][0]["text"].startswith("The client supports roots but no roots"), answer
    # Each of those backend requests got the gateway's error, none an answer.
    for tool, method in [("trigger-url-elicitation", "elicitation/create"),
                         ("trigger-sampling-request", "sampling/createMessage"), ("get-roots-list", "roots/list")]:
        [(_, _, sent, answered)] = shared.calls_to(tool)
        asks = [m["id"] for m in answered if m.get("method") == method]
        assert asks, (tool, answered)
        replies = [m for m in sent if "method" not in m and m.get("id") in asks]
        # (server-everything's startup `roots/list` came with no call in flight: refused too.)
        assert all("error" in m for m in replies), (tool, replies)
        assert any(refused in m["error"]["message"] for m in replies), (tool, replies)

    # A host that declared URL mode is asked, on the wire: a gateway key, the backend's URL and
    # message, no elicitationId, a sealed state; its retry answers the backend.
    url_only = {"elicitation": {"url": {}}}
    args = {"url": "https://example.com/y", "message": "Open it"}
    _, answer = _raw_call(shared.url, 4, "ev__trigger-url-elicitation", args, url_only)
    asked = answer["result"]
    assert asked["resultType"] == "input_required", answer
    [(key, request)] = asked["inputRequests"].items()
    assert request == {"method": "elicitation/create",
                       "params": {"mode": "url", "url": "https://example.com/y", "message": "Open it"}}, asked
    _, answer = _raw_call(shared.url, 5, "ev__trigger-url-elicitation", args, url_only,
                          inputResponses={key: {"action": "decline"}}, requestState=asked["requestState"])
    assert answer["result"]["resultType"] == "complete", answer
    assert answer["result"]["content"][0]["text"].startswith("❌ User declined to open the URL"), answer

    # The backend's -32042 for a host that did not declare URL mode: -32021 naming it (the
    # 2026-07-28 code for a missing client capability), never -32042.
    _, answer = _raw_call(shared.url, 6, "ev__trigger-url-elicitation",
                          {"url": "https://example.com/z", "errorPath": True}, {"elicitation": {"form": {}}})
    assert answer["error"]["code"] == -32021, answer
    assert answer["error"]["data"] == {"requiredCapabilities": {"elicitation": {"url": {}}}}, answer
    assert_clean_backend_hop(shared)


# --------------------------------------------------------------------------- URL elicitation required (-32042)


async def test_url_elicitation_required_becomes_input_required(pooled: Bridged) -> None:
    """server-everything's error path: `trigger-url-elicitation` with `errorPath` first answers
    -32042 (URLElicitationRequired, MCP 2025-11-25) naming a prerequisite URL, and proceeds when
    the same call comes again (asking for its own URL). 2026-07-28 has no -32042: the host is
    asked the prerequisite as a URL input request, and its retry re-issues the original call
    (dual-era.md R24)."""
    host = Host()  # elicitation only: no startup ask from the backend
    args = {"url": "https://example.com/after", "errorPath": True}
    async with host.client(pooled.url, MODERN, sample=False, roots=False) as client:
        done = await client.call_tool("ev__trigger-url-elicitation", args)
    assert host.asked == [
        {"kind": "elicitation", "mode": "url", "url": "https://modelcontextprotocol.io",
         "message": "Open this link to satisfy the prerequisite, then retry the request."},
        {"kind": "elicitation", "mode": "url", "url": "https://example.com/after",
         "message": "Please open the link to complete this action."}], host.asked
    assert not done.is_error and "✅ User completed the URL elicitation flow." in texts(done), done
    calls = pooled.calls_to("trigger-url-elicitation")
    assert [c[1]["params"] for c in calls] == [{"name": "trigger-url-elicitation", "arguments": args}] * 2, calls
    assert len({child for child, *_ in calls}) == 1, "the retry reached another backend process"
    assert_clean_backend_hop(pooled)


# --------------------------------------------------------------------------- cancel


async def test_closing_the_response_stream_cancels_the_backend_call(pooled: Bridged) -> None:
    host = Host()  # declares nothing: the backend has no startup ask for it
    started = anyio.Event()

    async def progress(_value: float, _total: float | None, _message: str | None) -> None:
        started.set()

    async with host.client(pooled.url, MODERN, elicit=False, sample=False, roots=False) as client:
        began = time.monotonic()
        with anyio.move_on_after(20) as scope:
            async with anyio.create_task_group() as tg:
                async def call() -> None:
                    await client.call_tool("ev__trigger-long-running-operation", {"duration": 3, "steps": 3},
                                           progress_callback=progress)
                    raise AssertionError("the call finished: it should have been cancelled")

                tg.start_soon(call)
                await started.wait()  # the backend is one step in: cancel the rest
                tg.cancel_scope.cancel()
        assert not scope.cancelled_caught, "no progress within 20 s"

        # The gateway: the call ended cancelled, nothing in flight upstream.
        deadline = time.monotonic() + 5
        while True:
            inflight = pooled.metric("mcpgate_upstream_inflight", backend="ev")
            cancelled = pooled.metric("mcpgate_requests_total", method="tools/call", era="modern",
                                      outcome="cancelled")
            if (inflight, cancelled) == (0, 1):
                break
            assert time.monotonic() < deadline, f"in flight {inflight}, cancelled {cancelled}"
            await anyio.sleep(0.05)

        # The backend: told to cancel that very request (waited past the three seconds the
        # operation would have taken). server-everything's tool ignores the abort and its SDK
        # sometimes still answers: a late answer is the backend's, and the gateway drops it
        # (the call above was never answered; the metrics say cancelled, nothing in flight).
        await anyio.sleep(max(0.0, began + 3.5 - time.monotonic()))
        [(child, request, sent, _answered)] = pooled.calls_to("trigger-long-running-operation")
        cancels = [m for m in sent if m.get("method") == "notifications/cancelled"]
        assert [c["params"]["requestId"] for c in cancels] == [request["id"]], cancels
        assert pooled.metric("mcpgate_upstream_inflight", backend="ev") == 0

        # The backend session is free again: the host's next call goes to the same process.
        done = await client.call_tool("ev__echo", {"message": "after the cancel"})
        assert texts(done) == "Echo: after the cancel", done
    [(echoed_by, *_)] = pooled.calls_to("echo")
    assert echoed_by == child, "the next call needed another backend process"


async def test_a_retry_that_never_comes_cancels_the_backend_call(
    start_gateway: StartGateway, everything: StdioCommand, tmp_path: Path
) -> None:
    """The host is answered `input_required` and walks away: after `input_required_timeout`
    the parked backend call is cancelled upstream and its backend session serves the next call;
    a late retry is refused, never run again."""
    bridged = _start(start_gateway, everything, tmp_path, None, input_required_timeout="1s")
    _wait_stateful(bridged)
    form = {"elicitation": {"form": {}}}  # no roots: no startup ask on its backend session
    _, answer = _raw_call(bridged.url, 1, "ev__trigger-elicitation-request", {}, form)
    asked = answer["result"]
    assert asked["resultType"] == "input_required", answer
    [(child, request, _, _)] = bridged.calls_to("trigger-elicitation-request")
    with anyio.fail_after(10):
        while True:
            sent, _ = bridged.children()[child]
            cancels = [m for m in sent if m.get("method") == "notifications/cancelled"]
            if cancels:
                break
            await anyio.sleep(0.1)
    assert [c["params"]["requestId"] for c in cancels] == [request["id"]], cancels
    [key] = asked["inputRequests"]
    _, late = _raw_call(bridged.url, 2, "ev__trigger-elicitation-request", {}, form,
                        inputResponses={key: {"action": "accept", "content": {"name": "Late"}}},
                        requestState=asked["requestState"])
    # -32602 "expired" once the state's expiry (whole seconds) passed, else -32603: no longer parked.
    assert "result" not in late and late["error"]["code"] in (-32602, -32603), late
    assert bridged.metric("mcpgate_input_required_retries_total", kind="continuation", result="resumed") == 0
    _, echo = _raw_call(bridged.url, 3, "ev__echo", {"message": "next"}, form)
    assert echo["result"]["content"][0]["text"] == "Echo: next", echo
    [(echoed_by, *_)] = bridged.calls_to("echo")
    assert echoed_by == child, "the abandoned call kept its backend session"
    assert len(bridged.calls_to("trigger-elicitation-request")) == 1, "the late retry ran the call again"


# --------------------------------------------------------------------------- subscriptions/listen


async def test_listen_gets_the_backends_updates_and_list_changes(shared: Bridged) -> None:
    uri = f"ev+{STATIC_DOC}"
    async with Client(shared.url, mode=MODERN) as client:
        async with client.listen(resources_list_changed=True, resource_subscriptions=[uri]) as sub:
            assert sub.honored.resources_list_changed and sub.honored.resource_subscriptions == [uri], sub.honored
            # Starts the backend's simulated updates: one at once for each subscribed resource.
            toggled = await client.call_tool("ev__toggle-subscriber-updates", {})
            assert texts(toggled).startswith("Started simulated resource updated notifications"), toggled
            # Registers a new resource: the backend announces a resource list change.
            made = await client.call_tool("ev__gzip-file-as-resource",
                                          {"name": "bridge.txt.gz", "data": "data:text/plain;base64,YnJpZGdl"})
            assert not made.is_error, made
            seen: set[str] = set()
            with anyio.fail_after(10):
                async for event in sub:
                    if isinstance(event, ResourceUpdated):
                        assert event.uri == uri, event
                        seen.add("updated")
                    elif isinstance(event, ResourcesListChanged):
                        seen.add("list_changed")
                    if seen == {"updated", "list_changed"}:
                        break
        listed = [r.uri for r in (await client.list_resources(cache_mode="refresh")).resources]
        assert "ev+demo://resource/session/bridge.txt.gz" in listed, listed
    [(_, _, sent, _)] = shared.calls_to("toggle-subscriber-updates")
    assert {"method": "resources/subscribe", "params": {"uri": STATIC_DOC}} in [
        {k: m[k] for k in ("method", "params")} for m in sent if m.get("method") == "resources/subscribe"], sent
