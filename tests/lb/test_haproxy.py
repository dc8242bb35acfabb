"""MCP sessions through HAProxy (deploy/haproxy/haproxy.cfg) in front of two replicas.

A host (the official Python SDK over Streamable HTTP) talks only to HAProxy. Every
request of a session must reach the replica that created it (stickiness on the
Mcp-Session-Id response and request headers), SSE progress must arrive as it is sent
(no buffering), and a crashed replica must cost only its own sessions: they get 404,
sessions on the other replica carry on, and a new initialize works.
"""

from __future__ import annotations

import base64
import time
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, AsyncIterator

import anyio
import httpx2
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

import support
from lb_support import REPLICA_HEADER, LoadBalancer, StartLoadBalancer, alive, haproxy_variant

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

KEYS = "k1:" + base64.b64encode(bytes([7] * 32)).decode()  # shared [cluster] session keys
STEPS, DELAY_MS = 4, 400  # demo__countdown: one progress notification every 400 ms


@dataclass
class Host:
    session: ClientSession
    session_id: str
    protocol_version: str


@asynccontextmanager
async def host_session(
    url: str, requests: list[httpx2.Request] | None = None, answers: list[tuple[str, int]] | None = None
) -> AsyncIterator[Host]:
    """An initialized SDK session; also returns the Mcp-Session-Id the server assigned.

    Every HTTP request the SDK sends is appended to `requests`, and the method and
    status of every answer to `answers`, if given.
    """
    ids: list[str] = []

    async def on_request(request: httpx2.Request) -> None:
        if requests is not None:
            requests.append(request)

    async def on_response(response: httpx2.Response) -> None:
        sid = response.headers.get("mcp-session-id")
        if sid and not ids:
            ids.append(sid)
        if answers is not None:
            answers.append((response.request.method, response.status_code))

    timeout = httpx2.Timeout(30, read=300)
    hooks = {"request": [on_request], "response": [on_response]}
    async with httpx2.AsyncClient(timeout=timeout, event_hooks=hooks) as client:
        async with streamable_http_client(url, http_client=client) as (read, write):
            async with ClientSession(read, write) as session:
                init = await session.initialize()
                assert ids, "initialize answered without an Mcp-Session-Id"
                yield Host(session, ids[0], str(init.protocol_version))


async def ping_status(url: str, host: Host) -> int | None:
    """HTTP status of a raw `ping` in `host`'s session at `url`; None if unreachable."""
    headers = {
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
        "Mcp-Session-Id": host.session_id,
        "MCP-Protocol-Version": host.protocol_version,
    }
    body = {"jsonrpc": "2.0", "id": "lb-probe", "method": "ping"}
    try:
        async with httpx2.AsyncClient(timeout=10) as client:
            return (await client.post(url, json=body, headers=headers)).status_code
    except httpx2.TransportError:
        return None


async def owners(lb: LoadBalancer, host: Host) -> list[str]:
    """The replicas that know `host`'s session, asked directly (bypassing HAProxy)."""
    return [r.name for r in lb.replicas if await ping_status(r.base + "/mcp", host) == 200]


async def call_ok(host: Host, name: str = "demo__test_simple_text", args: dict[str, Any] | None = None) -> None:
    with anyio.fail_after(20):
        result = support.dump(await host.session.call_tool(name, args or {}))
    assert result["content"] and not result.get("isError"), result


async def test_session_works_end_to_end_through_haproxy(lb: LoadBalancer) -> None:
    answers: list[tuple[str, int]] = []
    async with host_session(lb.url, answers=answers) as host:
        names = {t.name for t in await support.all_tools(host.session)}
        assert {"demo__test_simple_text", "demo__countdown"} <= names, sorted(names)
        await call_ok(host)

        # A streamed call: progress notifications on an SSE response, each one
        # timestamped on arrival. Without buffering they arrive DELAY_MS apart, and the
        # first well before the result; a buffering proxy delivers them all at the end.
        arrivals: list[tuple[float, float]] = []

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            arrivals.append((time.monotonic(), progress))

        with anyio.fail_after(30):
            result = await host.session.call_tool(
                "demo__countdown", {"steps": STEPS, "delay_ms": DELAY_MS}, progress_callback=on_progress
            )
        finished = time.monotonic()
        assert "finished" in support.dump(result)["content"][0]["text"]
        assert [p for _, p in arrivals] == [float(n) for n in range(1, STEPS + 1)], arrivals
        # Each gap is DELAY_MS give or take scheduling noise. Buffering shows as gaps near
        # 0; a proxy holding small writes back (Nagle, MSG_MORE) as gaps off by ~200 ms.
        gaps = [b[0] - a[0] for a, b in zip(arrivals, arrivals[1:])]
        assert all(abs(g - DELAY_MS / 1000) < 0.15 for g in gaps), f"progress not sent through as it came: gaps {gaps}"
        lead = finished - arrivals[0][0]
        assert lead > (STEPS - 1) * DELAY_MS / 1000 * 0.75, f"first progress only {lead:.2f} s before the result"

        # Every request above went to one replica: the other one does not know the session,
        # and HAProxy's stick table maps the session id to it.
        assert len(await owners(lb, host)) == 1
        assert host.session_id in lb.admin("show table mcpgate"), "session id not learned by the stick table"

    # POSTs, the GET stream and the closing DELETE all reached the session's replica.
    assert {"POST", "GET", "DELETE"} <= {m for m, _ in answers}, answers
    assert all(status < 400 for _, status in answers), answers


async def test_crashed_replica_costs_only_its_own_sessions(lb: LoadBalancer) -> None:
    async with AsyncExitStack() as stack:
        # New sessions are balanced (leastconn); open sessions until both replicas own one.
        owner_of: dict[str, str] = {}
        hosts: list[Host] = []
        for _ in range(8):
            host = await stack.enter_async_context(host_session(lb.url))
            found = await owners(lb, host)
            assert len(found) == 1, f"session {host.session_id} known to {found}"
            owner_of[host.session_id] = found[0]
            hosts.append(host)
            await call_ok(host)
            if len(set(owner_of.values())) == 2:
                break
        assert len(set(owner_of.values())) == 2, f"all sessions went to one replica: {owner_of}"

        victim, survivor = lb.replicas
        lost = [h for h in hosts if owner_of[h.session_id] == victim.name]
        kept = [h for h in hosts if owner_of[h.session_id] == survivor.name]
        children = victim.crash()
        assert children, "the crashed replica had no stdio children (demo backend)"

        # Sessions on the surviving replica keep working, through HAProxy.
        for host in kept:
            await call_ok(host)
            assert await ping_status(lb.url, host) == 200

        # Sessions of the crashed replica get 404 (HAProxy retries on the other replica,
        # which does not know them), which tells the host to re-initialize.
        for host in lost:
            assert await ping_status(lb.url, host) == 404
            with anyio.fail_after(20), pytest.raises(Exception, match="Session terminated"):
                await host.session.call_tool("demo__test_simple_text", {})

        # A new session works, on the survivor.
        async with host_session(lb.url) as fresh:
            await call_ok(fresh)
            assert await owners(lb, fresh) == [survivor.name]

        # The old sessions of the survivor still work after all that.
        for host in kept:
            await call_ok(host)

        await lb.await_states({victim.name: "DOWN", survivor.name: "UP"})

        # The crashed gateway's stdio children lost their stdin and must exit by
        # themselves (teardown kills leftovers by PID either way).
        deadline = time.monotonic() + 10
        while any(alive(p) for p in children) and time.monotonic() < deadline:
            await anyio.sleep(0.1)
        assert not [p for p in children if alive(p)], "stdio children outlived their crashed gateway"


async def served_by(lb: LoadBalancer, host: Host) -> str | None:
    """The replica HAProxy sends a `ping` of `host`'s session to (the test variant's header)."""
    headers = {
        "Accept": "application/json, text/event-stream",
        "Mcp-Session-Id": host.session_id,
        "MCP-Protocol-Version": host.protocol_version,
    }
    body = {"jsonrpc": "2.0", "id": "lb-probe", "method": "ping"}
    async with httpx2.AsyncClient(timeout=10) as client:
        return (await client.post(lb.url, json=body, headers=headers)).headers.get(REPLICA_HEADER)


async def test_unready_replica_gets_no_requests_and_its_sessions_go_on(
    start_lb: StartLoadBalancer, redis_url: str, tmp_path: Path
) -> None:
    # The shipped config has no `option persist`: a replica failing /readyz (a required
    # backend restarting, draining on SIGTERM) gets no request at all, not even of the
    # sessions stuck to it. They go on at the other replica, which serves them from the
    # sealed id and the shared store: the deployment the config is for (shared
    # `[cluster]` keys, `[cluster] redis`). With `option persist` they would still go to
    # the unready replica.
    config = support.DEFAULT_CONFIG.read_text() + f'\n[cluster]\nredis = "{redis_url}"\n'
    lb = start_lb(config, haproxy_cfg=haproxy_variant(tmp_path), replica_env={"MCPGATE_SESSION_KEYS": KEYS})
    async with AsyncExitStack() as stack:
        owner_of: dict[str, str | None] = {}
        hosts: list[Host] = []
        for _ in range(8):
            host = await stack.enter_async_context(host_session(lb.url))
            owner_of[host.session_id] = await served_by(lb, host)
            hosts.append(host)
            if len(set(owner_of.values())) == 2:
                break
        assert set(owner_of.values()) == {"mcpgate-1", "mcpgate-2"}, f"all sessions went to one replica: {owner_of}"

        # Replica 1 starts failing its readiness check (the check now goes to a closed
        # port) while it keeps serving: HAProxy marks it DOWN.
        unready, ready = lb.replicas
        answer = lb.admin(f"set server mcpgate/{unready.name} check-port {support.free_port()}")
        assert not answer.strip(), answer
        await lb.await_states({unready.name: "DOWN", ready.name: "UP"})

        # Every session goes on, at the ready replica: no 404, calls work.
        for host in hosts:
            await call_ok(host)
            assert await ping_status(lb.url, host) == 200
            assert await served_by(lb, host) == ready.name, owner_of[host.session_id]

        # New sessions all go to the ready replica.
        for _ in range(3):
            async with host_session(lb.url) as fresh:
                await call_ok(fresh)
                assert await served_by(lb, fresh) == ready.name


@pytest.mark.parametrize("keep_alive, cut", [("1s", False), ("30s", True)])
async def test_keep_alives_hold_silent_streams_open(start_lb: StartLoadBalancer, keep_alive: str, cut: bool) -> None:
    # HAProxy ends an exchange after MCPGATE_LB_TIMEOUT without data. A tool call that
    # is silent for longer stays on its one SSE response only if the gateway's
    # keep-alives come more often; otherwise HAProxy cuts the stream and the SDK has to
    # resume it with a GET carrying Last-Event-ID. The second case shows the test can
    # tell the difference.
    config = support.DEFAULT_CONFIG.read_text().replace(
        "[server]\n", f'[server]\nsse_keep_alive = "{keep_alive}"\n', 1
    )
    lb = start_lb(config, {"MCPGATE_LB_TIMEOUT": "3s"})
    requests: list[httpx2.Request] = []
    async with host_session(lb.url, requests) as host:
        with anyio.fail_after(30):
            result = await host.session.call_tool("demo__countdown", {"steps": 1, "delay_ms": 5000})
        assert "finished" in support.dump(result)["content"][0]["text"]
    resumed = [r for r in requests if "last-event-id" in r.headers]
    assert bool(resumed) == cut, f"keep-alive {keep_alive}: resumptions {[(r.method, dict(r.headers)) for r in resumed]}"


async def test_two_haproxy_instances_share_the_session_table(start_lb: StartLoadBalancer) -> None:
    # Two balancers (several HAProxy pods behind a cloud LB, or DNS round-robin) see
    # different requests of one host. Sessions initialized through the first must be
    # routed to their replica by the second, which never saw their `initialize`: the
    # replicas share no session keys here, so a misrouted request would get 404.
    lb = start_lb(peers=True)
    assert lb.peer is not None
    async with AsyncExitStack() as stack:
        hosts = [await stack.enter_async_context(host_session(lb.url)) for _ in range(6)]
        assert {o for h in hosts for o in await owners(lb, h)} == {"mcpgate-1", "mcpgate-2"}, (
            "leastconn should have used both replicas"
        )
        deadline = time.monotonic() + 10
        while not all(h.session_id in lb.peer.admin("show table mcpgate") for h in hosts):
            assert time.monotonic() < deadline, f"peer never learned the sessions:\n{lb.peer.admin('show table mcpgate')}"
            await anyio.sleep(0.1)
        for host in hosts:
            assert await ping_status(lb.peer.url, host) == 200, f"session {host.session_id} misrouted by the peer"
