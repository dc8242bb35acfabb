"""Helpers for the load-balancer test: replicas, HAProxy's view of them, the process table."""

from __future__ import annotations

import csv
import io
import os
import signal
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import anyio
import anyio.to_thread
import httpx2

from support import ServerProcess

UP_TIMEOUT = 20.0  # seconds for HAProxy's health checks to see both replicas UP
HAPROXY_CFG = Path(__file__).resolve().parents[2] / "deploy" / "haproxy" / "haproxy.cfg"
REPLICA_HEADER = "x-mcpgate-replica"  # the variants' response header naming the server


# --------------------------------------------------------------------------- HAProxy variants


def haproxy_variant(
    tmp_path: Path, *, sticky: bool = True, servers: int = 2, fast_checks: bool = False, name: str = "haproxy"
) -> Path:
    """A test-local variant of the shipped deploy/haproxy/haproxy.cfg, written to `tmp_path`.

    Always: a response header (`REPLICA_HEADER`) naming the server that answered (HAProxy's
    own 502/503 included). `sticky=False`: no stick table, `balance roundrobin` (no
    affinity). `servers` > 2: `mcpgate-3`... at `MCPGATE_LB_SERVER3`... `fast_checks`:
    health checks every 500 ms (fall 2, rise 2), so a stopped or restarted replica is
    seen within about a second instead of 4 s. Everything else is the shipped file; fails
    if the shipped file no longer has what is replaced, so the variants stay in step.
    """
    text = HAPROXY_CFG.read_text()

    def replace(old: str, new: str) -> None:
        nonlocal text
        assert old in text, f"the shipped haproxy.cfg changed; update tests/lb/lb_support.py:\n{old}"
        text = text.replace(old, new)

    if not sticky:
        replace(
            ".if defined(MCPGATE_LB_LOCAL_PEER)\n"
            "    stick-table type string len 128 size 100k expire 30m peers mcpgate\n"
            ".else\n"
            "    stick-table type string len 128 size 100k expire 30m\n"
            ".endif\n",
            "",
        )
        replace("    stick store-response res.hdr(mcp-session-id)\n", "")
        replace("    stick match req.hdr(mcp-session-id)\n", "")
        replace("    balance leastconn\n", "    balance roundrobin\n")
    replace(
        "    option http-no-delay\n",
        "    option http-no-delay\n"
        "    # test only: which replica answered (HAProxy's own errors included)\n"
        f"    http-after-response set-header {REPLICA_HEADER} %[srv_name]\n",
    )
    if fast_checks:
        replace("check inter 2s fastinter 1s downinter 2s fall 2 rise 2", "check inter 500ms fall 2 rise 2")
    second = '    server mcpgate-2 "${MCPGATE_LB_SERVER2-mcpgate-2:8080}"\n'
    replace(second, second + "".join(f'    server mcpgate-{n} "${{MCPGATE_LB_SERVER{n}}}"\n' for n in range(3, servers + 1)))
    path = tmp_path / f"{name}.cfg"
    path.write_text(text)
    return path


# --------------------------------------------------------------------------- processes


def descendants(pid: int) -> list[int]:
    """PIDs of every live descendant of `pid`, from the process table (/proc)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        # The command name is in parentheses and may contain spaces: split after it.
        fields = stat[stat.rindex(")") + 2 :].split()
        children.setdefault(int(fields[1]), []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def alive(pid: int) -> bool:
    """Whether `pid` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


@dataclass
class Replica:
    name: str  # HAProxy's server name: mcpgate-1 / mcpgate-2
    port: int
    process: ServerProcess
    orphans: list[int] = field(default_factory=list)  # children left by crash()

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def crash(self) -> list[int]:
        """SIGKILL the gateway (no shutdown code runs); returns its children's PIDs.

        The children (stdio backends) lose their stdin and must exit on their own; the
        caller checks that, and `stop` kills any that did not, by PID.
        """
        kids = descendants(self.process.proc.pid)
        self.process.proc.send_signal(signal.SIGKILL)
        self.process.proc.wait(timeout=5)
        self.orphans = kids
        return kids

    def stop(self) -> None:
        kids = descendants(self.process.proc.pid) + self.orphans
        self.process.stop()
        for pid in kids:
            if alive(pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass


@dataclass
class LoadBalancer:
    url: str  # the MCP endpoint through HAProxy
    stats: str  # HAProxy's stats page
    replicas: list[Replica]
    process: ServerProcess
    admin_socket: Path  # HAProxy's runtime API (MCPGATE_LB_ADMIN_SOCKET)
    peer: "LoadBalancer | None" = None  # a second instance sharing the stick table (peers)

    def admin(self, command: str) -> str:
        """Runs one runtime API command (`set server ...`, `show table ...`)."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(5)
            s.connect(str(self.admin_socket))
            s.sendall(command.encode() + b"\n")
            chunks = []
            while chunk := s.recv(65536):
                chunks.append(chunk)
        return b"".join(chunks).decode()

    def server_states(self) -> dict[str, str]:
        """HAProxy's view of the replicas: server name -> status (UP, DOWN, ...)."""
        text = httpx2.get(self.stats + ";csv", timeout=5).text
        rows = csv.DictReader(io.StringIO(text.lstrip("# ")))
        return {r["svname"]: r["status"] for r in rows if r["pxname"] == "mcpgate" and r["svname"].startswith("mcpgate-")}

    def wait_for_states(self, want: dict[str, str], timeout: float = UP_TIMEOUT) -> None:
        """Blocks until HAProxy reports each named server in the wanted state."""
        deadline = time.monotonic() + timeout
        states: dict[str, str] = {}
        while time.monotonic() < deadline:
            states = self.server_states()
            if _matches(states, want):
                return
            time.sleep(0.1)
        raise AssertionError(f"HAProxy servers are {states}, expected {want} within {timeout:.0f} s")

    async def await_states(self, want: dict[str, str], timeout: float = UP_TIMEOUT) -> None:
        """`wait_for_states` for async tests: open SDK sessions keep running meanwhile."""
        deadline = time.monotonic() + timeout
        states: dict[str, str] = {}
        while time.monotonic() < deadline:
            states = await anyio.to_thread.run_sync(self.server_states)
            if _matches(states, want):
                return
            await anyio.sleep(0.1)
        raise AssertionError(f"HAProxy servers are {states}, expected {want} within {timeout:.0f} s")


def _matches(states: dict[str, str], want: dict[str, str]) -> bool:
    # Exact states: "UP 1/2" (failing, not yet down) or "DOWN 1/2" (recovering) do not count.
    return all(states.get(k) == v for k, v in want.items())


StartLoadBalancer = Callable[..., LoadBalancer]
"""The type of the `start_lb` fixture."""
