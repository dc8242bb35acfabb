"""Soak and chaos run of a real `mcpgate serve` (scripts/soak.sh MINUTES).

A fixed, modest mixed load — tool calls, lists, GET SSE streams, session churn,
resource subscriptions, a notification flood — runs against four backends while
faults are injected:

- `crashy` (stdio) is SIGKILLed every few seconds (the gateway restarts it);
- `stall` (a separate `mcpgate demo-server --http` process) is stalled with
  SIGSTOP and resumed with SIGCONT;
- `flood` (stdio) sends thousands of progress notifications per call;
- `steady` (stdio, per-session) is never touched: nothing that goes to it may fail.

Every answer is checked: a call's result must be its own (the text it sent, the
progress token of its own session), and an error is allowed only on a call to
a backend a fault hit (`crashy`, `stall`) — every other error fails the run.
Samples of the gateway's RSS and open file descriptors are taken every few
seconds; after the warm-up their fitted drift over the run must stay within
2 % of the mean (with a small absolute floor for short runs, and never tighter than
three standard errors of the fit: scatter is not a trend). Zombie children
of the gateway that stay zombies across two samples fail the run.

Prints a JSON report; exit 0 on pass. Traffic goes to 127.0.0.1 only; every
loop is bounded by the run's duration.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx2 as httpx

ACCEPT = "application/json, text/event-stream"
VERSION = "2025-11-25"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def fd_count(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def proc_stat(pid: int) -> tuple[str, int] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    rest = text[text.rindex(")") + 2 :].split()
    return rest[0], int(rest[1])


def children(pid: int) -> list[tuple[int, str]]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            st = proc_stat(int(entry))
            if st and st[1] == pid:
                out.append((int(entry), st[0]))
    return out


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def drift(samples: list[tuple[float, float]]) -> tuple[float, float, float]:
    """Least-squares slope × window, the mean, and the slope's standard error × window
    (how much of the drift the samples' scatter alone explains), of (t, value) samples."""
    n = len(samples)
    if n < 3:
        return 0.0, samples[0][1] if samples else 0.0, 0.0
    mt = sum(t for t, _ in samples) / n
    mv = sum(v for _, v in samples) / n
    var = sum((t - mt) ** 2 for t, _ in samples)
    slope = sum((t - mt) * (v - mv) for t, v in samples) / var if var else 0.0
    window = samples[-1][0] - samples[0][0]
    residual = sum((v - mv - slope * (t - mt)) ** 2 for t, v in samples) / (n - 2)
    stderr = (residual / var) ** 0.5 if var else 0.0
    return slope * window, mv, stderr * window


def messages(resp: httpx.Response) -> list[dict[str, Any]]:
    return events(resp)[0]


def events(resp: httpx.Response) -> tuple[list[dict[str, Any]], str | None]:
    """The JSON-RPC messages of a JSON or SSE answer, and the last SSE event id."""
    ctype = resp.headers.get("content-type", "")
    if ctype.startswith("text/event-stream"):
        out, last = [], None
        for line in resp.text.splitlines():
            if line.startswith("id:"):
                last = line[3:].strip()
            elif line.startswith("data:") and line[5:].strip():
                out.append(json.loads(line[5:]))
        return out, last
    return ([resp.json()] if resp.content else []), None


class Stats:
    def __init__(self) -> None:
        self.ok: Counter[str] = Counter()
        self.fault_errors: Counter[str] = Counter()
        self.errors: list[str] = []
        self.isolation: list[str] = []

    def bad(self, what: str) -> None:
        if len(self.errors) < 50:
            self.errors.append(what)
        else:
            self.errors.append("…")
            del self.errors[50:-1]


class Host:
    """One MCP host session over Streamable HTTP."""

    def __init__(self, http: httpx.AsyncClient, url: str, tag: str) -> None:
        self.http, self.url, self.tag = http, url, tag
        self.sid: str | None = None
        self.n = 0
        self.resumed = 0

    def headers(self) -> dict[str, str]:
        h = {"accept": ACCEPT, "content-type": "application/json"}
        if self.sid:
            h["mcp-session-id"] = self.sid
            h["mcp-protocol-version"] = VERSION
        return h

    async def open(self) -> None:
        r = await self.http.post(self.url, headers=self.headers(), json={
            "jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": VERSION, "capabilities": {},
                "clientInfo": {"name": f"soak-{self.tag}", "version": "0"}}})
        r.raise_for_status()
        self.sid = r.headers["mcp-session-id"]
        await self.http.post(self.url, headers=self.headers(),
                             json={"jsonrpc": "2.0", "method": "notifications/initialized"})

    async def rpc(self, method: str, params: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        self.n += 1
        rid = f"{self.tag}-{self.n}"
        r = await self.http.post(self.url, headers=self.headers(),
                                 json={"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        if r.status_code != 200:
            raise RuntimeError(f"HTTP {r.status_code} {r.text[:200]}")
        msgs, last = events(r)
        # A host that reads too slowly has its stream cut (the gateway logs it);
        # a correct host resumes it with Last-Event-ID, as this one does.
        for _ in range(5):
            if last is None or any(m.get("id") == rid for m in msgs):
                break
            g = await self.http.get(self.url, headers={**self.headers(), "last-event-id": last})
            if g.status_code != 200:
                raise RuntimeError(f"resume after {last}: HTTP {g.status_code} {g.text[:200]}")
            more, last = events(g)
            msgs += more
            self.resumed += 1
        final = [m for m in msgs if m.get("id") == rid]
        if len(final) != 1:
            raise RuntimeError(f"{method}: no single answer with id {rid}: {msgs[-3:]}")
        return final[0], [m for m in msgs if "id" not in m or m.get("id") != rid]

    async def close(self) -> None:
        if self.sid:
            await self.http.delete(self.url, headers=self.headers())
            self.sid = None


def text_of(resp: dict[str, Any]) -> str:
    content = resp.get("result", {}).get("content") or [{}]
    return content[0].get("text", "")


async def caller(url: str, stats: Stats, stop: float, backend: str, tag: str, pace: float) -> None:
    """Calls `backend`'s echo in a loop; checks each answer is its own."""
    async with httpx.AsyncClient(timeout=20, trust_env=False) as http:
        host = Host(http, url, tag)
        await host.open()
        i = 0
        while time.monotonic() < stop:
            i += 1
            text = f"{tag}:{i}:{random.random()}"
            kind = f"call:{backend}"
            try:
                resp, _ = await host.rpc("tools/call", {"name": f"{backend}__echo", "arguments": {"text": text}})
                if "error" in resp:
                    raise RuntimeError(json.dumps(resp["error"])[:200])
                got = text_of(resp)
                if got != text:
                    stats.isolation.append(f"{tag} sent {text!r} got {got!r}")
                stats.ok[kind] += 1
            except Exception as e:  # noqa: BLE001 - classified below
                if backend in ("crashy", "stall"):
                    stats.fault_errors[kind] += 1
                else:
                    stats.bad(f"{kind}: {e}")
            await asyncio.sleep(pace)
        await host.close()


async def lister(url: str, stats: Stats, stop: float) -> None:
    async with httpx.AsyncClient(timeout=20, trust_env=False) as http:
        host = Host(http, url, "lists")
        await host.open()
        while time.monotonic() < stop:
            for method in ("tools/list", "resources/list", "prompts/list"):
                try:
                    resp, _ = await host.rpc(method, {})
                    if "error" in resp:
                        raise RuntimeError(resp["error"])
                    stats.ok[method] += 1
                except Exception as e:  # noqa: BLE001
                    stats.bad(f"{method}: {e}")
            await asyncio.sleep(0.5)
        await host.close()


async def churn(url: str, stats: Stats, stop: float) -> None:
    """Sessions that open, call, hold a GET stream briefly, and end."""
    async with httpx.AsyncClient(timeout=20, trust_env=False) as http:
        n = 0
        while time.monotonic() < stop:
            n += 1
            host = Host(http, url, f"churn{n}")
            try:
                await host.open()
                resp, _ = await host.rpc("tools/call", {"name": "steady__echo", "arguments": {"text": host.tag}})
                if text_of(resp) != host.tag:
                    stats.isolation.append(f"{host.tag} got {text_of(resp)!r}")
                async with http.stream("GET", url, headers=host.headers()) as r:
                    if r.status_code != 200:
                        raise RuntimeError(f"GET {r.status_code}")
                    await asyncio.sleep(0.3)
                stats.ok["churn"] += 1
            except Exception as e:  # noqa: BLE001
                stats.bad(f"churn: {e}")
            finally:
                try:
                    await host.close()
                except Exception as e:  # noqa: BLE001
                    stats.bad(f"churn DELETE: {e}")
            await asyncio.sleep(0.7)


async def subscriber(url: str, stats: Stats, stop: float) -> None:
    """Subscribes to a resource, has it touched, and sees the update on its GET stream."""
    async with httpx.AsyncClient(timeout=20, trust_env=False) as http:
        host = Host(http, url, "subs")
        await host.open()
        resp, _ = await host.rpc("resources/list", {})
        uri = next(r["uri"] for r in resp["result"]["resources"] if r["uri"].endswith("fx://static") and "steady" in r["uri"])
        while time.monotonic() < stop:
            try:
                async with http.stream("GET", url, headers=host.headers()) as stream:
                    resp, _ = await host.rpc("resources/subscribe", {"uri": uri})
                    if "error" in resp:
                        raise RuntimeError(resp["error"])
                    await host.rpc("tools/call", {"name": "steady__touch", "arguments": {"uri": "fx://static"}})
                    seen = False
                    async def read() -> None:
                        nonlocal seen
                        async for line in stream.aiter_lines():
                            if line.startswith("data:") and "notifications/resources/updated" in line:
                                if json.loads(line[5:])["params"]["uri"] != uri:
                                    stats.isolation.append(f"update for another uri: {line}")
                                seen = True
                                return
                    try:
                        await asyncio.wait_for(read(), 5)
                    except asyncio.TimeoutError:
                        pass
                    if not seen:
                        raise RuntimeError("no resources/updated on the GET stream")
                    resp, _ = await host.rpc("resources/unsubscribe", {"uri": uri})
                    stats.ok["subscribe"] += 1
            except Exception as e:  # noqa: BLE001
                stats.bad(f"subscribe: {e}")
            await asyncio.sleep(1.0)
        await host.close()


async def flooder(url: str, stats: Stats, stop: float) -> None:
    """Calls that bring thousands of progress notifications; all must be this session's."""
    async with httpx.AsyncClient(timeout=30, trust_env=False) as http:
        host = Host(http, url, "flood")
        await host.open()
        i = 0
        while time.monotonic() < stop:
            i += 1
            token = f"flood-{i}"
            try:
                resp, related = await host.rpc("tools/call", {
                    "name": "flood__slow_progress", "arguments": {"n": 2000, "interval_ms": 0},
                    "_meta": {"progressToken": token}})
                if text_of(resp) != "progressed 2000":
                    raise RuntimeError(f"flood answer {resp}")
                foreign = [m for m in related if m.get("params", {}).get("progressToken") != token]
                if foreign:
                    stats.isolation.append(f"flood got foreign messages: {foreign[:2]}")
                stats.ok["flood"] += 1
                stats.ok["flood_notifications"] += len(related)
                stats.ok["flood_resumed"] = host.resumed
            except Exception as e:  # noqa: BLE001
                stats.bad(f"flood: {e}")
            await asyncio.sleep(1.5)
        await host.close()


async def kill_crashy(gw_pid: int, stop: float, every: float, counts: Counter[str]) -> None:
    while time.monotonic() < stop:
        await asyncio.sleep(every)
        for pid, _ in children(gw_pid):
            if "--label crashy" in cmdline(pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                    counts["crashy_sigkill"] += 1
                except ProcessLookupError:
                    pass


async def stall_http(pid: int, stop: float, counts: Counter[str]) -> None:
    while time.monotonic() < stop:
        await asyncio.sleep(6)
        os.kill(pid, signal.SIGSTOP)
        counts["stall_sigstop"] += 1
        await asyncio.sleep(3)
        os.kill(pid, signal.SIGCONT)


async def sampler(gw_pid: int, stop: float, period: float, out: dict[str, Any]) -> None:
    zombies_prev: set[int] = set()
    while time.monotonic() < stop:
        t = time.monotonic()
        out["rss"].append((t, rss_kib(gw_pid)))
        out["fds"].append((t, fd_count(gw_pid)))
        kids = children(gw_pid)
        zombies = {pid for pid, state in kids if state == "Z"}
        out["lasting_zombies"] |= zombies & zombies_prev
        zombies_prev = zombies
        out["children_max"] = max(out["children_max"], len(kids))
        await asyncio.sleep(period)


def start(argv: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=log.open("wb"), env={**os.environ, **(env or {})})


def wait_port(port: int, within: float = 20) -> None:
    end = time.monotonic() + within
    while time.monotonic() < end:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise SystemExit(f"nothing listens on {port}")


async def run(minutes: float) -> int:
    gw_bin = os.environ["MCPGATE_BIN"]
    fake = os.environ["FAKE_STDIO"]
    work = Path(tempfile.mkdtemp(prefix="mcpgate-soak-"))
    demo_port, gw_port = free_port(), free_port()
    demo = start([gw_bin, "demo-server", "--http", f"127.0.0.1:{demo_port}"], work / "demo.log")
    wait_port(demo_port)
    config = f"""
[server]
listen = "127.0.0.1:{gw_port}"
metrics_listen = "off"
backend_ping_interval = "5s"
[backends.steady]
type = "stdio"
command = "{fake}"
args = ["--subscribe", "--label", "steady"]
mode = "per_session"
[backends.crashy]
type = "stdio"
command = "{fake}"
args = ["--label", "crashy"]
timeout = "3s"
[backends.flood]
type = "stdio"
command = "{fake}"
args = ["--label", "flood"]
[backends.stall]
type = "http"
url = "http://127.0.0.1:{demo_port}/mcp"
timeout = "2s"
"""
    (work / "gw.toml").write_text(config)
    gw = start([gw_bin, "serve", "--config", str(work / "gw.toml")], work / "gw.log",
               {"RUST_LOG": "warn"})
    wait_port(gw_port)
    url = f"http://127.0.0.1:{gw_port}/mcp"
    await asyncio.sleep(1.0)

    duration = minutes * 60
    t0 = time.monotonic()
    stop = t0 + duration
    stats = Stats()
    faults: Counter[str] = Counter()
    samples: dict[str, Any] = {"rss": [], "fds": [], "lasting_zombies": set(), "children_max": 0}
    period = 2.0 if duration <= 120 else 10.0
    tasks = [
        sampler(gw.pid, stop, period, samples),
        kill_crashy(gw.pid, stop, 4.0, faults),
        stall_http(demo.pid, stop, faults),
        lister(url, stats, stop),
        churn(url, stats, stop),
        subscriber(url, stats, stop),
        flooder(url, stats, stop),
    ]
    for i in range(3):
        tasks.append(caller(url, stats, stop, "steady", f"steady{i}", 0.05))
    tasks.append(caller(url, stats, stop, "crashy", "crashy0", 0.1))
    tasks.append(caller(url, stats, stop, "stall", "stall0", 0.1))
    results = await asyncio.gather(*tasks, return_exceptions=True)
    for r in results:
        if isinstance(r, BaseException):
            stats.bad(f"worker died: {r!r}")

    gw_alive = gw.poll() is None
    gw.send_signal(signal.SIGTERM)
    try:
        code = gw.wait(30)
    except subprocess.TimeoutExpired:
        gw.kill()
        code = None
    demo.send_signal(signal.SIGCONT)
    demo.terminate()
    demo.wait(10)

    warm = duration * 0.2 if duration > 120 else min(20.0, duration / 3)
    report: dict[str, Any] = {"minutes": minutes, "ok": dict(stats.ok), "fault_errors": dict(stats.fault_errors),
                              "faults": dict(faults), "unexpected_errors": stats.errors,
                              "isolation_violations": stats.isolation[:20],
                              "lasting_zombies": sorted(samples["lasting_zombies"]),
                              "children_max": samples["children_max"],
                              "gateway_alive_at_end": gw_alive, "gateway_exit": code, "work_dir": str(work)}
    passed = gw_alive and code == 0 and not stats.errors and not stats.isolation and not samples["lasting_zombies"]
    # The fd floor: a 2-minute CI run on a loaded machine drifted 3.4 fds (26 → 53 while
    # pools and children ramp up) against a floor of 3; a leak per call or per injected
    # fault would be tens to hundreds in that run (30 SIGKILLs, 6,000 calls).
    for key, floor in (("rss", 4096.0), ("fds", 6.0)):
        after = [(t, v) for t, v in samples[key] if t - t0 >= warm]
        d, mean, noise = drift(after)
        # A leak is a steady climb: the bound is 2 % of the mean (a small floor for
        # short runs), widened to three standard errors of the fitted drift, so that
        # the scatter of a short run (open fds go up and down with pooled
        # connections and killed children) is not read as a trend.
        limit = max(0.02 * mean, floor, 3 * noise)
        report[key] = {"samples": len(after), "mean": round(mean, 1), "drift": round(d, 1),
                       "noise": round(noise, 1),
                       "drift_pct": round(100 * d / mean, 2) if mean else 0.0,
                       "first": samples[key][0][1] if samples[key] else None,
                       "last": samples[key][-1][1] if samples[key] else None,
                       "max": max((v for _, v in samples[key]), default=None), "limit": round(limit, 1),
                       "ok": d <= limit}
        # Only growth is a leak: a count that falls after the warm-up released something.
        passed &= d <= limit
    report["pass"] = passed
    print(json.dumps(report, indent=2))
    if passed:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(run(float(sys.argv[1]) if len(sys.argv) > 1 else 1.0)))
