"""2026-07-28 (stateless) requests through HAProxy in front of two replicas with no affinity.

Issue 13 acceptance 4, dual-era.md R31-R33: modern requests carry no session, so they need
no stick table. Two replicas share `[cluster]` session keys (and nothing else: no shared
store) behind HAProxy balancing round-robin, the shipped deploy/haproxy/haproxy.cfg with
its stick table taken out and `balance roundrobin` in (a test-local variant, derived from
the shipped file so the two stay in step). HAProxy names the replica that answered in a
response header (`X-Mcpgate-Replica`, also on its own 502s).

- 1,000 `tools/call`s all succeed, spread over both replicas.
- A list cursor minted by one replica continues on the other.
- A 2026-07-28 backend's `requestState`, wrapped in the gateway's, is retried on the other
  replica every round and completes (the backend, a Python `mcp` 2.3 server with one
  child per replica, shares its own state key as its SDK asks of several instances).
- A bridge continuation (a legacy backend's call waiting for the host's answer) is bound
  to its replica: a retry on the other one is -32603 "continuation not on this replica"
  naming the holder, and the holder then completes it.
- SIGKILL of one replica during 1,000 calls loses only the calls that were in flight on
  it: every failure is a 5xx or a connection failure of a request sent before the kill
  and routed to the victim (HAProxy's header where it answered; otherwise a call the
  survivor's access log does not have); everything else succeeds, on the survivor.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest

import support
from lb_support import REPLICA_HEADER, LoadBalancer, Replica, StartLoadBalancer, haproxy_variant

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(180)]

MODERN = "2026-07-28"
CALLS = 1000
# The [cluster] session keys both replicas share (32 bytes 0x05), and the Python
# backend's own requestState key.
SESSION_KEYS = "k1:BQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQU="
MRTR_STATE_KEY = "lb-test requestState key, the same for every child"
MRTR_SERVER = support.REPO / "tests" / "e2e" / "mrtr_server.py"


def round_robin_cfg(tmp_path: Path) -> Path:
    """The shipped haproxy.cfg without session affinity, balancing round-robin, naming the
    replica that answered (`lb_support.haproxy_variant`)."""
    return haproxy_variant(tmp_path, sticky=False, name="haproxy-roundrobin")


def replica_config() -> str:
    """The shipped default config with its demo backend pinned to the legacy era (the demo
    serves 2026-07-28 too, and `auto` would find that: the bridge case needs a legacy
    backend), plus a 2026-07-28 backend (`mrtr`, the Python server) and short list pages."""
    base = support.DEFAULT_CONFIG.read_text().replace("[server]\n", "[server]\npage_size = 4\n", 1)
    base = base.replace("[backends.demo]\n", '[backends.demo]\nera = "legacy"\n', 1)
    assert 'era = "legacy"' in base, "the default config's demo backend table moved"
    mrtr = {
        "type": "stdio",
        "command": support.venv_python(),
        "args": [str(MRTR_SERVER)],
        "env": {"MRTR_STATE_KEY": MRTR_STATE_KEY},
    }
    tables = support.gateway_toml({"mrtr": mrtr}).split("\n[backends.", 1)[1]
    return base + "\n[backends." + tables


@pytest.fixture
def lb(start_lb: StartLoadBalancer, tmp_path: Path) -> LoadBalancer:
    return start_lb(
        replica_config(),
        haproxy_cfg=round_robin_cfg(tmp_path),
        replica_env={"MCPGATE_SESSION_KEYS": SESSION_KEYS},
    )


# --------------------------------------------------------------------------- modern requests


@dataclass
class Answer:
    status: int
    replica: str | None  # HAProxy's header: the server that answered
    message: dict[str, Any] | None  # the JSON-RPC response
    headers: httpx2.Headers

    @property
    def result(self) -> dict[str, Any]:
        assert self.message is not None and "result" in self.message, self
        return self.message["result"]


def _response_of(resp: httpx2.Response) -> dict[str, Any] | None:
    """The JSON-RPC response in a JSON or SSE answer (SSE: the last message with an id)."""
    kind = resp.headers.get("content-type", "")
    if kind.startswith("application/json"):
        return resp.json()
    found = None
    if kind.startswith("text/event-stream"):
        for line in resp.text.splitlines():
            if line.startswith("data:"):
                msg = json.loads(line[5:])
                if "id" in msg and ("result" in msg or "error" in msg):
                    found = msg
    return found


_ids = iter(range(1 << 20, 1 << 30))  # below: the kill test numbers its calls


async def modern(
    client: httpx2.AsyncClient,
    url: str,
    method: str,
    params: dict[str, Any] | None = None,
    caps: dict[str, Any] | None = None,
    rpc_id: int | None = None,
) -> Answer:
    """One 2026-07-28 request: the `_meta` envelope and the headers mirroring the body."""
    params = dict(params or {})
    params["_meta"] = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": caps or {},
        "io.modelcontextprotocol/clientInfo": {"name": "lb-test", "version": "0"},
    }
    headers = {
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": method,
    }
    name = params.get("name") or params.get("uri")
    if isinstance(name, str):
        headers["Mcp-Name"] = name
    body = {"jsonrpc": "2.0", "id": next(_ids) if rpc_id is None else rpc_id, "method": method, "params": params}
    resp = await client.post(url, json=body, headers=headers)
    message = _response_of(resp) if resp.status_code == 200 else None
    return Answer(resp.status_code, resp.headers.get(REPLICA_HEADER), message, resp.headers)


def call_ok(answer: Answer) -> bool:
    """A `tools/call` that completed without a tool error."""
    m = answer.message
    return (
        answer.status == 200
        and m is not None
        and m.get("result", {}).get("resultType") == "complete"
        and not m["result"].get("isError")
    )


def client() -> httpx2.AsyncClient:
    return httpx2.AsyncClient(timeout=httpx2.Timeout(30), limits=httpx2.Limits(max_connections=64))


# --------------------------------------------------------------------------- tests


async def test_a_thousand_modern_calls_all_succeed_on_both_replicas(lb: LoadBalancer) -> None:
    answers: list[Answer] = []

    async def worker(n: int) -> None:
        for i in range(n, CALLS, 16):
            args = {"text": f"call {i}"}
            answers.append(await modern(c, lb.url, "tools/call", {"name": "demo__echo", "arguments": args}))

    async with client() as c, anyio.create_task_group() as tg:
        for n in range(16):
            tg.start_soon(worker, n)
    failed = [a for a in answers if not call_ok(a)]
    assert len(answers) == CALLS and not failed, failed[:3]
    served = {r: sum(a.replica == r for a in answers) for r in ("mcpgate-1", "mcpgate-2")}
    assert all(n >= CALLS // 2 - 50 for n in served.values()), f"round-robin without affinity: {served}"
    # Stateless: no answer opened a session.
    assert not [a for a in answers if "mcp-session-id" in a.headers]


async def test_a_cursor_from_one_replica_continues_on_the_other(lb: LoadBalancer) -> None:
    a, b = (r.base + "/mcp" for r in lb.replicas)
    async with client() as c:
        whole: list[str] = []
        cursor = None
        while True:  # every page from replica 1
            page = (await modern(c, a, "tools/list", {"cursor": cursor} if cursor else {})).result
            whole += [t["name"] for t in page["tools"]]
            if not (cursor := page.get("nextCursor")):
                break
        assert len(whole) > 8, whole  # several pages of 4
        mixed: list[str] = []
        cursor, turn = None, 0
        while True:  # page n from replica 1 + n % 2, each cursor from the other
            url = (a, b)[turn % 2]
            page = (await modern(c, url, "tools/list", {"cursor": cursor} if cursor else {})).result
            mixed += [t["name"] for t in page["tools"]]
            turn += 1
            if not (cursor := page.get("nextCursor")):
                break
        assert mixed == whole
        # The same through HAProxy (round-robin alternates the replicas).
        through: list[str] = []
        seen: list[str | None] = []
        cursor = None
        while True:
            answer = await modern(c, lb.url, "tools/list", {"cursor": cursor} if cursor else {})
            seen.append(answer.replica)
            through += [t["name"] for t in answer.result["tools"]]
            if not (cursor := answer.result.get("nextCursor")):
                break
        assert through == whole and len(set(seen)) == 2, seen


async def test_a_wrapped_request_state_completes_across_replicas(lb: LoadBalancer) -> None:
    # `two_steps` asks for a name, then for a greeting written for it: two rounds of
    # input_required, each retried through HAProxy, which sends it to the other replica.
    caps = {"elicitation": {"form": {}}, "sampling": {}}
    call: dict[str, Any] = {"name": "mrtr__two_steps", "arguments": {}}
    replicas: list[str | None] = []
    async with client() as c:
        answer = await modern(c, lb.url, "tools/call", call, caps)
        for _ in range(4):
            replicas.append(answer.replica)
            result = answer.result
            if result["resultType"] == "complete":
                break
            assert result["resultType"] == "input_required", result
            responses = {}
            for key, ask in result["inputRequests"].items():
                if ask["method"] == "elicitation/create":
                    responses[key] = {"action": "accept", "content": {"name": "Ada"}}
                else:
                    text = "Hello Ada" if "Ada" in json.dumps(ask) else "?"
                    responses[key] = {
                        "role": "assistant",
                        "content": {"type": "text", "text": text},
                        "model": "lb-test",
                    }
            retry = {**call, "inputResponses": responses, "requestState": result["requestState"]}
            answer = await modern(c, lb.url, "tools/call", retry, caps)
    assert answer.result["resultType"] == "complete", answer
    assert "greeting: Hello Ada" in answer.result["content"][0]["text"], answer.result
    assert len(replicas) == 3, replicas
    assert all(x != y for x, y in zip(replicas, replicas[1:])), f"each round on the other replica: {replicas}"


async def test_a_bridge_continuation_retried_on_the_other_replica_is_refused(lb: LoadBalancer) -> None:
    caps = {"elicitation": {"form": {}}}
    call: dict[str, Any] = {"name": "demo__test_elicitation", "arguments": {"message": "Who?"}}
    async with client() as c:
        first = await modern(c, lb.url, "tools/call", call, caps)
        result = first.result
        assert result["resultType"] == "input_required", result
        (key,) = result["inputRequests"]
        retry = {
            **call,
            "inputResponses": {key: {"action": "accept", "content": {"username": "ada", "email": "a@x"}}},
            "requestState": result["requestState"],
        }
        # Round-robin: the retry lands on the other replica.
        elsewhere = await modern(c, lb.url, "tools/call", retry, caps)
        assert elsewhere.replica != first.replica, (first.replica, elsewhere.replica)
        error = (elsewhere.message or {}).get("error")
        assert error and error["code"] == -32603, elsewhere
        assert error["message"] == "continuation not on this replica", error
        assert error["data"]["holder"] != error["data"]["replica"], error
        assert "without requestState" in error["data"]["action"], error
        # The holder, addressed directly, completes the call.
        holder = next(r for r in lb.replicas if r.name == first.replica)
        done = await modern(c, holder.base + "/mcp", "tools/call", retry, caps)
    assert call_ok(done), done
    assert "ada" in json.dumps(done.result), done.result


@dataclass
class Sent:
    at: float  # monotonic time the request was sent
    done: float = 0.0  # ... and answered (or failed)
    answer: Answer | None = None
    failure: str | None = None  # a transport error


async def test_killing_one_replica_loses_only_its_in_flight_calls(lb: LoadBalancer) -> None:
    # Calls of ~150 ms each (countdown: one step), 32 at a time, numbered by their
    # JSON-RPC id; one replica is killed when call 300 is sent.
    victim, survivor = lb.replicas
    sent: list[Sent] = []
    call = {"name": "demo__countdown", "arguments": {"steps": 1, "delay_ms": 150}}
    killed_at: list[float] = []

    async def worker(c: httpx2.AsyncClient) -> None:
        while len(sent) < CALLS:
            s = Sent(time.monotonic())
            sent.append(s)
            number = len(sent)
            if number == 300:
                killed_at.append(time.monotonic())
                victim.crash()
            try:
                s.answer = await modern(c, lb.url, "tools/call", call, rpc_id=number)
            except httpx2.TransportError as e:
                s.failure = repr(e)
            s.done = time.monotonic()

    async with client() as c, anyio.create_task_group() as tg:
        for _ in range(32):
            tg.start_soon(worker, c)
    (kill,) = killed_at
    ok = {n for n, s in enumerate(sent, 1) if s.answer and call_ok(s.answer)}
    failed = {n: s for n, s in enumerate(sent, 1) if n not in ok}
    # Where each failed call went: HAProxy names the server on the answers it sends
    # (its own 502s too), but a call whose server connection dies before any answer is
    # ended by closing the client connection, with no answer and no log line (HAProxy's
    # handling of a reused connection's keep-alive race). Such a call was not served by
    # the survivor, which logs an access line with the JSON-RPC id of every call it ends.
    on_survivor = {n for n in ok if sent[n - 1].answer.replica == survivor.name}
    served = await served_by(survivor, on_survivor)
    for n, s in failed.items():
        assert s.at < kill, f"call {n}, sent {s.at - kill:.3f} s after the kill, failed: {s}"
        assert s.failure or s.answer.status >= 500, f"call {n}: not a 5xx or connection failure: {s}"
        assert s.failure or s.answer.replica == victim.name, f"call {n} failed on {s.answer.replica}: {s}"
        assert n not in served, f"call {n} failed though the survivor served it: {s}"
    lost = len(failed)
    # In flight at the kill: sent before it, answered (or failed) after it.
    in_flight = [n for n, s in enumerate(sent, 1) if s.at < kill < s.done]
    on_victim = [n for n in in_flight if n in failed or sent[n - 1].answer.replica == victim.name]
    assert 0 < lost <= len(on_victim) <= len(in_flight) <= 32, (lost, on_victim, in_flight)
    after = [s for s in sent if s.at > kill]
    assert len(after) >= CALLS - 300 - 32
    assert all(s.answer and s.answer.replica == survivor.name for s in after), "all later calls on the survivor"
    print(
        f"killed {victim.name} with {len(in_flight)} calls in flight, {len(on_victim)} of them on it: "
        f"lost {lost}, {CALLS - lost} of {CALLS} succeeded; failures: {sorted({_why(s) for s in failed.values()})}"
    )
    await lb.await_states({victim.name: "DOWN", survivor.name: "UP"})


async def served_by(replica: Replica, expected: set[int]) -> set[int]:
    """The JSON-RPC ids of the `tools/call`s `replica` logged an access line for, once it
    logged at least `expected` (a line is written when a request ends)."""
    pattern = re.compile(r'mcpgate::access: request method="tools/call" rpc_id=(\d+) ')
    found: set[int] = set()
    with anyio.fail_after(10):
        while not expected <= found:
            found = {int(m.group(1)) for m in pattern.finditer(replica.process.log_text(limit=10**9))}
            await anyio.sleep(0.1)
    return found


def _why(s: Sent) -> str:
    return s.failure or f"HTTP {s.answer.status if s.answer else '?'}"
