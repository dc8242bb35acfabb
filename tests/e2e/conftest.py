"""Fixtures for the mcpgate end-to-end tests.

Run with `scripts/test.sh` (builds the gateway, installs the pinned third-party servers) or,
once those exist, `tests/.venv/bin/python -m pytest tests/e2e -v`. The gateway binary is
`$MCPGATE_BIN`, else `$CARGO_TARGET_DIR/debug/mcpgate`, else `target/debug/mcpgate`.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any, Iterator

import pytest

import support
from support import Gateway, ServerProcess, StartGateway, StdioCommand

_counter = itertools.count(1)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


# --------------------------------------------------------------------------- failure reports


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Appends the output of every server the test started to the report of a failed phase."""
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        for proc in getattr(item, "_mcpgate_servers", []):
            report.sections.append((f"output of {proc.name} ({proc.log_path})", proc.log_text()))


def _register(request: pytest.FixtureRequest, proc: ServerProcess) -> None:
    servers = getattr(request.node, "_mcpgate_servers", None)
    if servers is None:
        servers = []
        request.node._mcpgate_servers = servers
    servers.append(proc)


# --------------------------------------------------------------------------- binaries and commands


@pytest.fixture(scope="session")
def mcpgate_bin() -> Path:
    path = support.mcpgate_bin()
    if not path.exists():
        pytest.fail(f"gateway binary {path} not found: build it (`cargo build`) or set MCPGATE_BIN")
    return path


@pytest.fixture(scope="session")
def everything() -> StdioCommand:
    """server-everything over stdio (tests/node_modules, run with the system Node)."""
    try:
        return support.everything_command()
    except RuntimeError as e:
        pytest.fail(str(e))


@pytest.fixture(scope="session")
def time_server() -> StdioCommand:
    """mcp-server-time over stdio (tests/.venv), local timezone UTC."""
    return support.time_command()


# --------------------------------------------------------------------------- servers


@pytest.fixture
def start_gateway(
    request: pytest.FixtureRequest, tmp_path: Path, mcpgate_bin: Path
) -> Iterator[StartGateway]:
    """Factory: `start_gateway(config, env=None, path="/mcp")` -> Gateway.

    `config` is a Path to an existing config file, TOML text, or a dict of backend tables
    (written with `support.gateway_toml`). The gateway runs `serve --config FILE --listen
    127.0.0.1:PORT` with a free PORT; the call returns once the port accepts connections
    (30 s at most). Every gateway started is stopped at teardown (SIGTERM, SIGKILL after 5 s).
    """
    started: list[ServerProcess] = []

    def start(config: Path | str | dict[str, Any], env: dict[str, str] | None = None, path: str = "/mcp") -> Gateway:
        n = next(_counter)
        if isinstance(config, Path):
            config_path = config
        else:
            text = config if isinstance(config, str) else support.gateway_toml(config, {"path": path})
            config_path = tmp_path / f"mcpgate-{n}.toml"
            config_path.write_text(text)
        port = support.free_port()
        argv = [str(mcpgate_bin), "serve", "--config", str(config_path), "--listen", f"127.0.0.1:{port}"]
        proc = ServerProcess(f"mcpgate serve #{n}", argv, port, tmp_path / f"mcpgate-{n}.log", env)
        started.append(proc)
        _register(request, proc)
        proc.wait_for_port()
        base = f"http://127.0.0.1:{port}"
        return Gateway(url=base + path, base=base, port=port, config_path=config_path, process=proc)

    yield start
    for proc in reversed(started):
        proc.stop()


@pytest.fixture
def default_gateway(start_gateway: StartGateway) -> Gateway:
    """The gateway with the shipped config/mcpgate.toml (built-in demo backend `demo` over stdio)."""
    return start_gateway(support.DEFAULT_CONFIG)


@pytest.fixture
def demo_http(request: pytest.FixtureRequest, tmp_path: Path, mcpgate_bin: Path) -> Iterator[str]:
    """`mcpgate demo-server --http 127.0.0.1:PORT`; yields its MCP URL."""
    port = support.free_port()
    argv = [str(mcpgate_bin), "demo-server", "--http", f"127.0.0.1:{port}"]
    proc = ServerProcess("mcpgate demo-server --http", argv, port, tmp_path / "demo-server.log")
    _register(request, proc)
    try:
        proc.wait_for_port()
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.stop()
