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
