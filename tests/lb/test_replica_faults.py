"""S3 (rolling restart) and S2 (`kill -9`) of shared/design/replicas.md §7, through HAProxy.

Three `mcpgate serve` replicas share the `[cluster]` keys and a real `redis-server`, behind
HAProxy: the shipped deploy/haproxy/haproxy.cfg with a third server (STICK, affinity on
`Mcp-Session-Id`) and its round-robin variant without affinity (RR); both with 500 ms
health checks and a response header naming the replica (`lb_support.haproxy_variant`).
Backends: `demo_shared` (the demo over stdio, shared), `remote` (one `mcpgate demo-server
--http`, per_session: each replica opens its own upstream session per host session),
`rec` (tests/lb/recorder_server.py, shared: appends every nonce it executes to one file,
the duplicate-execution detector) and `demo` (the demo over stdio, per_session: 1 call in
10 is its `countdown`, an SSE answer with progress).

Ten hosts (the official Python SDK through HAProxy) each call in a loop, one call at a
time with 250 ms between calls (~15 calls/s in all); every call is a ledger row (session,
nonce, tool, start, end, outcome, the HTTP status and replica of its POST). "Lost" = no
outcome within `LOST_AFTER`; "duplicate" = a nonce the recorder executed twice; every HTTP
answer of every host is checked for 404 (a forced re-initialization).

- S3 (STICK and RR): SIGTERM replica 1, wait for it to exit, restart it, wait for /readyz
  and HAProxy UP, then 2, then 3 (`drain_delay` 1.5 s, `shutdown_grace` 5 s). 0 failed,
  0 lost, 0 duplicates, 0 404; the calls in flight on a replica at its SIGTERM finish OK;
  no upstream session of a host session is DELETEd (the `remote` log: only the replicas'
  own catalogue sessions end).
- S2 (RR and STICK): `kill -9` of replica 2 while at least 2 calls run on it, restart 8 s
  later. Calls not in flight on the victim: 100 % OK. Calls in flight on it: their result,
  a terminal JSON-RPC error (the resumed stream's -32603, the SDK resuming with
  `Last-Event-ID` on another replica) or a closed connection (a call whose answer had not
  started: HAProxy closes the client connection), within `IN_FLIGHT_BOUND` of the kill,
  never a hang; 0 lost, 0 duplicates, 0 404. Every host whose standalone GET stream was
  on the victim re-attaches (the SDK's GET + `Last-Event-ID`, at another replica: 200)
  within `REATTACH_BOUND` of the kill, and a `tools/list_changed` announced by every
  replica afterwards reaches every host (on its re-attached stream).
- No host ever sees a refusal (no HTTP status >= 300): neither a 404 nor a 410 of a
  resumed stream.

Not asserted as the design's plan has it, because not built (phase 4 of the design, owner
adoption), but pinned to what happens today:
- a per-session stdio child dies with its replica; the session's next call on another
  replica runs on a new child (its state starts afresh: no error, no 404);
- upstream HTTP sessions are not shared between replicas: a session reaching another
  replica opens a new one there (counted and printed, `opened during it`); the old one
  is not DELETEd and expires at the backend;
- a notification for a session produced on a replica other than the one its host's GET
  stream is attached to stays there, unheard (phase 4 forwards it to the owner), so the
  `list_changed` of S2 is announced by every replica;
- mcp 2.3 does not catch a transport error of a POST: the closed connection of a call in
  flight on the victim ends that host's whole client (counted, `hosts whose SDK client
  died`; only such hosts may die).
"""

from __future__ import annotations

import base64
import os
import re
import shutil
import signal
import subprocess
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import anyio
import httpx2
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

import support
from lb_support import REPLICA_HEADER, LoadBalancer, Replica, haproxy_variant
from support import ServerProcess

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

KEYS = "k1:" + base64.b64encode(bytes([7] * 32)).decode()
RECORDER = Path(__file__).resolve().parent / "recorder_server.py"
HOSTS = 10
PAUSE = 0.25  # seconds between two calls of a host: ~1.5 calls/s each, ~15/s in all
LOST_AFTER = 30.0  # seconds without an outcome: the call is lost
IN_FLIGHT_BOUND = 5.0  # seconds from the kill to the outcome of a call in flight on the victim
READY_TIMEOUT = 20.0
REATTACH_BOUND = 2.0  # seconds from the kill to a GET stream's re-attachment elsewhere


# --------------------------------------------------------------------------- the cluster


def replica_config(port: int, redis_port: int, remote_url: str, rec_file: Path) -> str:
    demo = support.demo_stdio_command()
    backends = {
        "demo_shared": demo.backend(mode="shared"),
        # 2025-11-25 upstream (the demo speaks both eras; 2026-07-28 has no sessions).
        "remote": {"type": "http", "url": remote_url, "mode": "per_session", "era": "legacy"},
        "rec": {
            "type": "stdio",
            "command": support.venv_python(),
            "args": [str(RECORDER)],
            "env": {"REC_FILE": str(rec_file)},
            "mode": "shared",
        },
        "demo": demo.backend(mode="per_session"),
    }
    server = {
        "listen": f"127.0.0.1:{port}",
        "metrics_listen": f"127.0.0.1:{support.free_port()}",
        "drain_delay": "1500ms",
        "shutdown_grace": "5s",
    }
    cluster = f'\n[cluster]\nredis = "redis://127.0.0.1:{redis_port}/0"\nheartbeat = "1s"\n'
    return support.gateway_toml(backends, server) + cluster


@dataclass
class Cluster:
    tmp: Path
    bin: Path
    register: Callable[[ServerProcess], None]
    replicas: list[Replica] = field(default_factory=list)
    configs: dict[str, Path] = field(default_factory=dict)
    lb: LoadBalancer | None = None
    remote_log: Path | None = None
    rec_file: Path | None = None
    started: list[Any] = field(default_factory=list)
    generation: Counter[str] = field(default_factory=Counter)

    def spawn(self, replica_name: str, port: int) -> ServerProcess:
        self.generation[replica_name] += 1
        log = self.tmp / f"{replica_name}.{self.generation[replica_name]}.log"
        argv = [str(self.bin), "serve", "--config", str(self.configs[replica_name])]
        proc = ServerProcess(replica_name, argv, port, log, {"MCPGATE_SESSION_KEYS": KEYS})
        self.register(proc)
        return proc

    async def wait_ready(self, replica: Replica, timeout: float = READY_TIMEOUT) -> None:
        """Until the replica's /readyz is 200 (asked directly)."""
        with anyio.fail_after(timeout):
            async with httpx2.AsyncClient(timeout=2) as c:
                while True:
                    try:
                        if (await c.get(replica.base + "/readyz")).status_code == 200:
                            return
                    except httpx2.TransportError:
                        pass
                    await anyio.sleep(0.05)

    async def stop_gracefully(self, replica: Replica, timeout: float = 15.0) -> float:
        """SIGTERM; returns the seconds until the process exited."""
        start = time.monotonic()
        replica.process.proc.send_signal(signal.SIGTERM)
        with anyio.fail_after(timeout):
            while replica.process.proc.poll() is None:
                await anyio.sleep(0.02)
        return time.monotonic() - start

    async def restart(self, replica: Replica) -> float:
        """Starts the replica again on its port; returns the seconds until HAProxy sees it UP."""
        start = time.monotonic()
        replica.process.stop()  # reaps it, closes its log
        replica.process = self.spawn(replica.name, replica.port)
        await self.wait_ready(replica)
        assert self.lb is not None
        await self.lb.await_states({replica.name: "UP"})
        return time.monotonic() - start


@pytest.fixture(scope="session")
def redis_bin() -> str:
    found = shutil.which("redis-server")
    if not found:
        pytest.fail("redis-server is not installed: run tests/cluster/ensure-redis.sh (scripts/test.sh does)")
    return found


@pytest.fixture
def start_cluster(
    request: pytest.FixtureRequest, tmp_path: Path, mcpgate_bin: Path, haproxy_bin: str, redis_bin: str
) -> Iterator[Callable[[bool], Any]]:
    """Factory: `await start_cluster(sticky)` -> Cluster with Redis, `remote`, three
    replicas and HAProxy (STICK or RR), all UP. Every process is stopped by pid at teardown."""

    def register(proc: ServerProcess) -> None:
        if not hasattr(request.node, "_mcpgate_servers"):
            request.node._mcpgate_servers = []
        request.node._mcpgate_servers.append(proc)

    cluster = Cluster(tmp_path, mcpgate_bin, register)

    async def start(sticky: bool) -> Cluster:
        redis_port = support.free_port()
        redis_argv = [redis_bin, "--port", str(redis_port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        redis = ServerProcess("redis", redis_argv, redis_port, tmp_path / "redis.log")
        cluster.started.append(redis)
        register(redis)
        remote_port = support.free_port()
        argv = [str(mcpgate_bin), "demo-server", "--http", f"127.0.0.1:{remote_port}"]
        remote = ServerProcess("remote", argv, remote_port, tmp_path / "remote.log", {"RUST_LOG": "info"})
        cluster.started.append(remote)
        register(remote)
        cluster.remote_log = remote.log_path
        cluster.rec_file = tmp_path / "executed.txt"
        cluster.rec_file.touch()
        redis.wait_for_port()
        remote.wait_for_port()
        for n in (1, 2, 3):
            name, port = f"mcpgate-{n}", support.free_port()
            cluster.configs[name] = tmp_path / f"{name}.toml"
            cluster.configs[name].write_text(
                replica_config(port, redis_port, f"http://127.0.0.1:{remote_port}/mcp", cluster.rec_file)
            )
            cluster.replicas.append(Replica(name, port, cluster.spawn(name, port)))
            cluster.started.append(cluster.replicas[-1])
        for r in cluster.replicas:
            r.process.wait_for_port()
            await cluster.wait_ready(r)
        cfg = haproxy_variant(tmp_path, sticky=sticky, servers=3, fast_checks=True)
        cluster.lb = start_haproxy(cluster, haproxy_bin, cfg)
        cluster.started.append(cluster.lb.process)
        register(cluster.lb.process)
        await cluster.lb.await_states({r.name: "UP" for r in cluster.replicas})
        return cluster

    yield start
    for item in reversed(cluster.started):  # HAProxy, the replicas, then the backends
        item.stop()


def start_haproxy(cluster: Cluster, haproxy_bin: str, cfg: Path) -> LoadBalancer:
    lb_port, stats_port = support.free_port(), support.free_port()
    env = {
        "MCPGATE_LB_BIND": f"127.0.0.1:{lb_port}",
        "MCPGATE_LB_STATS_BIND": f"127.0.0.1:{stats_port}",
        "MCPGATE_LB_CHECK_PATH": "/readyz",
        "MCPGATE_LB_ADMIN_SOCKET": str(cluster.tmp / "haproxy.sock"),
        **{f"MCPGATE_LB_SERVER{n}": f"127.0.0.1:{r.port}" for n, r in enumerate(cluster.replicas, 1)},
    }
    check = subprocess.run([haproxy_bin, "-c", "-f", str(cfg)], env={**os.environ, **env}, capture_output=True, text=True)
    assert check.returncode == 0, f"haproxy -c failed:\n{check.stdout}{check.stderr}"
    proc = ServerProcess("haproxy", [haproxy_bin, "-db", "-f", str(cfg)], lb_port, cluster.tmp / "haproxy.log", env)
    proc.wait_for_port()
    return LoadBalancer(
        url=f"http://127.0.0.1:{lb_port}/mcp",
        stats=f"http://127.0.0.1:{stats_port}/stats",
        replicas=cluster.replicas,
        process=proc,
        admin_socket=cluster.tmp / "haproxy.sock",
    )


# --------------------------------------------------------------------------- the ledger


@dataclass
class Row:
    """One call: what the host saw."""

    host: int
    session: str
    nonce: str
    tool: str
    start: float
    end: float = 0.0
    outcome: str = ""  # "ok", "error CODE MESSAGE", "tool-error ...", "wrong ...", "lost", "exception ..."
    status: int | None = None  # of the POST
    replica: str | None = None  # HAProxy's header on the POST's answer

    @property
    def ok(self) -> bool:
        return self.outcome == "ok"


@dataclass
class Ledger:
    rows: list[Row] = field(default_factory=list)
    answers: list[tuple[int, str, int, str | None, float]] = field(default_factory=list)  # host, method, status, replica, t
    sessions: dict[int, str] = field(default_factory=dict)
    gets: list[tuple[int, int, str | None, float]] = field(default_factory=list)  # host, status, replica, t
    list_changed: list[tuple[int, float]] = field(default_factory=list)  # host, t
    dead_hosts: list[int] = field(default_factory=list)  # hosts whose SDK client died

    def not_ok(self, rows: list[Row] | None = None) -> list[Row]:
        return [r for r in (self.rows if rows is None else rows) if not r.ok]

    def status_404(self) -> list[tuple[int, str, int, str | None, float]]:
        return [a for a in self.answers if a[2] == 404]


def plan(k: int, nonce: str) -> tuple[str, dict[str, Any], str | None]:
    """The host's k-th call: tool, arguments and the text its result must contain."""
    if k % 10 == 9:
        return "demo__countdown", {"steps": 4, "delay_ms": 300}, "Countdown finished after 4 steps"
    kind = k % 3
    if kind == 0:
        return "demo_shared__echo", {"text": nonce}, nonce
    if kind == 1:
        return "remote__echo", {"text": nonce}, nonce
    return "rec__record", {"nonce": nonce, "ms": 800 if k % 2 else 0}, f"recorded {nonce}"


async def host_loop(n: int, url: str, ledger: Ledger, stop: anyio.Event, ready: Callable[[], None]) -> None:
    """One host: initialize, then calls until `stop`, one at a time, each a ledger row."""
    current: list[Row] = []

    async def on_response(response: httpx2.Response) -> None:
        request = response.request
        replica = response.headers.get(REPLICA_HEADER)
        ledger.answers.append((n, request.method, response.status_code, replica, time.monotonic()))
        sid = response.headers.get("mcp-session-id")
        if sid and n not in ledger.sessions:
            ledger.sessions[n] = sid
        if request.method == "GET":
            ledger.gets.append((n, response.status_code, replica, time.monotonic()))
        if request.method == "POST" and current and b'"tools/call"' in request.content:
            current[0].status, current[0].replica = response.status_code, replica

    try:
        await _host_calls(n, url, ledger, stop, ready, current, on_response)
    except Exception as e:  # noqa: BLE001 - see below
        # mcp 2.3 does not catch a transport error of a POST (HAProxy closes the client
        # connection without an answer when the replica dies with the request): it ends
        # the whole client, so the call in flight ends with it and the host stops.
        if current:
            current[0].outcome, current[0].end = f"transport {_root(e)!r:.160}", time.monotonic()
        ledger.dead_hosts.append(n)


def _root(e: BaseException) -> BaseException:
    while isinstance(e, BaseExceptionGroup) and len(e.exceptions) == 1:
        e = e.exceptions[0]
    return e


async def _host_calls(
    n: int,
    url: str,
    ledger: Ledger,
    stop: anyio.Event,
    ready: Callable[[], None],
    current: list[Row],
    on_response: Callable[[httpx2.Response], Any],
) -> None:
    timeout = httpx2.Timeout(10, read=60)
    async with httpx2.AsyncClient(timeout=timeout, event_hooks={"response": [on_response]}) as client:
        async with streamable_http_client(url, http_client=client) as (read, write):
            async def on_message(message: Any) -> None:
                if getattr(message, "method", None) == "notifications/tools/list_changed":
                    ledger.list_changed.append((n, time.monotonic()))

            async with ClientSession(read, write, message_handler=on_message) as session:
                await session.initialize()
                ready()
                k = 0
                while not stop.is_set():
                    nonce = f"h{n}-{k}"
                    tool, args, expect = plan(k, nonce)
                    row = Row(n, ledger.sessions.get(n, "?"), nonce, tool, time.monotonic())
                    ledger.rows.append(row)
                    current[:] = [row]
                    try:
                        with anyio.fail_after(LOST_AFTER):
                            result = support.dump(await session.call_tool(tool, args))
                        text = " ".join(c.get("text", "") for c in result.get("content", []))
                        if result.get("isError"):
                            row.outcome = f"tool-error {text[:120]}"
                        else:
                            row.outcome = "ok" if expect in text else f"wrong {text[:120]}"
                    except TimeoutError:
                        row.outcome = "lost"
                    except MCPError as e:
                        row.outcome = f"error {e.code} {e.message[:120]}"
                    except Exception as e:  # noqa: BLE001 - the ledger names it; the host stops
                        row.outcome = f"exception {e!r:.160}"
                    row.end = time.monotonic()
                    current.clear()
                    if row.outcome.startswith("exception"):
                        return
                    k += 1
                    await anyio.sleep(PAUSE)


async def run_load(url: str, ledger: Ledger, scenario: Callable[[], Any]) -> None:
    """HOSTS hosts in a loop while `scenario()` runs (started once all are initialized)."""
    stop = anyio.Event()
    initialized = 0

    def ready() -> None:
        nonlocal initialized
        initialized += 1

    async with anyio.create_task_group() as tg:
        for n in range(HOSTS):
            tg.start_soon(host_loop, n, url, ledger, stop, ready)
        with anyio.fail_after(20):
            while initialized < HOSTS:
                await anyio.sleep(0.05)
        try:
            await scenario()
        finally:
            stop.set()


def executions(cluster: Cluster) -> Counter[str]:
    assert cluster.rec_file is not None
    return Counter(line.split()[0] for line in cluster.rec_file.read_text().splitlines() if line.strip())


def upstream_sessions(cluster: Cluster) -> tuple[list[str], list[str]]:
    """The `remote` backend's sessions: (started, ended by their client), in log order."""
    assert cluster.remote_log is not None
    text = cluster.remote_log.read_text(errors="replace")
    started = re.findall(r"session started session=(\S+)", text)
    ended = re.findall(r"session ended by client session=(\S+)", text)
    return started, ended


def summary(name: str, ledger: Ledger, dup: dict[str, int], extra: str = "") -> str:
    rows = ledger.rows
    lost = [r for r in rows if r.outcome == "lost"]
    by_tool = Counter(r.tool for r in rows)
    odd = Counter(f"{method} {status}" for _, method, status, _, _ in ledger.answers if status >= 300)
    return (
        f"{name}: {len(rows)} calls ({dict(by_tool)}), failed {len(ledger.not_ok())}, lost {len(lost)}, "
        f"duplicates {len(dup)}, HTTP 404 {len(ledger.status_404())}, other answers >= 300 {dict(odd)}, "
        f"hosts whose SDK client died {len(ledger.dead_hosts)}; {extra}"
    )


def check_common(ledger: Ledger, cluster: Cluster) -> dict[str, int]:
    """Every call has an outcome, no nonce ran twice, no host saw a 404. Returns the duplicates."""
    assert all(r.end for r in ledger.rows), "a call without an outcome"
    assert not [r for r in ledger.rows if r.outcome == "lost"], "lost calls"
    dup = {k: v for k, v in executions(cluster).items() if v > 1}
    assert not dup, f"executed more than once: {dup}"
    assert not ledger.status_404(), f"HTTP 404 (forced re-initialization): {ledger.status_404()[:5]}"
    # No refusal at all: a resumed stream (POST or standalone GET) is never 410.
    refused = [(m, st) for _, m, st, _, _ in ledger.answers if st >= 300]
    assert not refused, refused
    return dup


async def toggle_bonus_everywhere(cluster: Cluster) -> None:
    """`demo_shared__toggle_bonus` at every replica, straight to its port, in a session of
    its own: each replica's shared demo changes its tools, and the replica announces
    `tools/list_changed` to every session it holds, on its standalone stream."""
    accept = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "toggler", "version": "1"}}}
    call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "demo_shared__toggle_bonus", "arguments": {}}}
    async with httpx2.AsyncClient(timeout=10) as c:
        for r in cluster.replicas:
            url = r.base + "/mcp"
            answer = await c.post(url, json=init, headers=accept)
            assert answer.status_code == 200, answer.text
            h = {**accept, "Mcp-Session-Id": answer.headers["mcp-session-id"], "MCP-Protocol-Version": "2025-11-25"}
            await c.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=h)
            answer = await c.post(url, json=call, headers=h)
            assert answer.status_code == 200 and '"result"' in answer.text, answer.text


# --------------------------------------------------------------------------- S3


@pytest.mark.parametrize("sticky", [True, False], ids=["STICK", "RR"])
async def test_s3_rolling_restart_loses_nothing(start_cluster: Callable[[bool], Any], sticky: bool) -> None:
    cluster: Cluster = await start_cluster(sticky)
    assert cluster.lb is not None
    # The replicas' own catalogue connections (none when they speak 2026-07-28 to it).
    catalogue, _ = upstream_sessions(cluster)
    ledger = Ledger()
    steps: list[str] = []
    marks: dict[str, Any] = {}

    async def roll() -> None:
        await anyio.sleep(3)  # warm-up: every host session reached `remote` at least once
        marks["before"] = upstream_sessions(cluster)[0]
        marks["t0"] = time.monotonic()
        for r in cluster.replicas:
            with anyio.move_on_after(3):  # SIGTERM while a call runs on the replica
                while not [x for x in ledger.rows if not x.end and x.replica == r.name]:
                    await anyio.sleep(0.02)
            sigterm = time.monotonic()
            drained = await cluster.stop_gracefully(r)
            held = [x for x in ledger.rows if x.start < sigterm and (x.end == 0 or x.end > sigterm) and x.replica == r.name]
            marks.setdefault("held", []).extend(held)
            up = await cluster.restart(r)
            steps.append(
                f"{r.name}: {len(held)} calls in flight on it at SIGTERM, exit {drained:.1f} s after SIGTERM, "
                f"UP {up:.1f} s after restart"
            )
            await anyio.sleep(1)
        marks["t1"] = time.monotonic()
        marks["during"] = upstream_sessions(cluster)
        await anyio.sleep(2)

    await run_load(cluster.lb.url, ledger, roll)
    dup = check_common(ledger, cluster)
    failed = ledger.not_ok()
    started, ended = marks["during"]
    host_upstream = [s for s in marks["before"] if s not in catalogue]
    new_upstream = started[len(marks["before"]) :]
    print(
        summary(
            f"S3 {'STICK' if sticky else 'RR'}",
            ledger,
            dup,
            f"roll {marks['t1'] - marks['t0']:.1f} s ({'; '.join(steps)}); upstream sessions: "
            f"{len(host_upstream)} of host sessions before the roll, {len(new_upstream)} opened during it, "
            f"ended during it {len(ended)} (catalogue {len(set(ended) & set(catalogue))})",
        )
    )
    assert not failed, [f"{r.nonce} {r.tool} {r.replica} {r.status}: {r.outcome}" for r in failed[:10]]
    assert len(ledger.rows) >= HOSTS * 20, len(ledger.rows)
    assert marks["held"] and all(r.ok for r in marks["held"]), "calls in flight at a SIGTERM finish there"
    # The roll DELETEs no upstream session of a host session: only each stopped replica's
    # own catalogue connection ends its session.
    assert not set(ended) & set(host_upstream + new_upstream), f"host sessions' upstream sessions DELETEd: {ended}"
    assert set(ended) <= set(catalogue), (ended, catalogue)
    assert host_upstream, "no host session reached `remote` before the roll"


# --------------------------------------------------------------------------- S2


@pytest.mark.parametrize("sticky", [False, True], ids=["RR", "STICK"])
async def test_s2_kill_9_costs_only_the_calls_in_flight_on_the_victim(
    start_cluster: Callable[[bool], Any], sticky: bool
) -> None:
    cluster: Cluster = await start_cluster(sticky)
    assert cluster.lb is not None
    victim = cluster.replicas[1]
    ledger = Ledger()
    marks: dict[str, float] = {}

    def slow_on_victim() -> list[Row]:
        # Slow calls (SSE answers: their head, with HAProxy's header, came after 100 ms).
        return [r for r in ledger.rows if not r.end and r.replica == victim.name]

    async def kill_and_restart() -> None:
        await anyio.sleep(5)
        with anyio.move_on_after(5):  # kill while at least 2 calls run on the victim
            while len(slow_on_victim()) < 2:
                await anyio.sleep(0.02)
        marks["kill"] = time.monotonic()
        victim.crash()
        await anyio.sleep(8)
        marks["restart"] = time.monotonic()
        marks["up"] = await cluster.restart(victim)
        marks["announce"] = time.monotonic()
        await toggle_bonus_everywhere(cluster)
        await anyio.sleep(5)

    await run_load(cluster.lb.url, ledger, kill_and_restart)
    kill = marks["kill"]
    in_flight = [r for r in ledger.rows if r.start < kill < r.end]
    on_victim = [r for r in in_flight if r.replica in (victim.name, None)]
    others = [r for r in ledger.rows if r not in on_victim]
    slowest = max((r.end - kill for r in on_victim), default=0.0)
    dup = executions(cluster)
    dup = {k: v for k, v in dup.items() if v > 1}
    print(
        summary(
            f"S2 {'STICK' if sticky else 'RR'}",
            ledger,
            dup,
            f"in flight at the kill {len(in_flight)}, on the victim {len(on_victim)} "
            f"(outcomes {sorted(Counter(r.outcome[:60] for r in on_victim).items())}), last outcome of those "
            f"{slowest:.2f} s after the kill; victim UP {marks['up']:.1f} s after its restart",
        )
    )
    check_common(ledger, cluster)
    # Every standalone GET stream cut on the victim re-attaches at another replica
    # within REATTACH_BOUND, and hears what is announced afterwards.
    last_get: dict[int, str | None] = {}
    for h, st, rep, t in ledger.gets:  # in time order
        if t < kill and st == 200:
            last_get[h] = rep
    on_victim_gets = {h for h, rep in last_get.items() if rep == victim.name}
    reattached = {h: min((t - kill for x, st, _, t in ledger.gets if x == h and t > kill and st == 200), default=None) for h in on_victim_gets}
    print(f"GET streams on the victim: {len(on_victim_gets)}, re-attached after (s): {reattached}; "
          f"list_changed heard by {len({h for h, t in ledger.list_changed if t > marks['announce']})} of {HOSTS - len(ledger.dead_hosts)} live hosts")
    assert on_victim_gets, "no GET stream was on the victim"
    alive_hosts = set(range(HOSTS)) - set(ledger.dead_hosts)
    slow = {h: a for h, a in reattached.items() if h in alive_hosts and (a is None or a > REATTACH_BOUND)}
    assert not slow, slow
    heard = {h for h, t in ledger.list_changed if t > marks["announce"]}
    assert alive_hosts <= heard, f"hosts that heard no list_changed after the re-attachments: {alive_hosts - heard}"
    failed_elsewhere = ledger.not_ok(others)
    assert not failed_elsewhere, [f"{r.nonce} {r.tool} {r.replica} {r.status} {r.start - kill:+.2f}: {r.outcome}" for r in failed_elsewhere[:10]]
    assert len(on_victim) >= 2, "the kill hit no call in flight on the victim"
    assert slowest <= IN_FLIGHT_BOUND, [(r.nonce, r.tool, round(r.end - kill, 2), r.outcome) for r in on_victim]
    # What ends a call in flight on the victim: its result (it finished before the kill
    # reached it) or a terminal error, never a retry elsewhere (its nonce ran once).
    assert all(r.ok or r.outcome.startswith(("error", "transport")) for r in on_victim), [r.outcome for r in on_victim]
    # Only a host whose call was cut on the victim can lose its client.
    assert len(ledger.dead_hosts) == len([r for r in on_victim if r.outcome.startswith("transport")]), ledger.dead_hosts
    assert len(ledger.rows) >= HOSTS * 20, len(ledger.rows)
