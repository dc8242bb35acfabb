"""Fixtures for the load-balancer test: two mcpgate replicas behind HAProxy.

HAProxy runs the shipped deploy/haproxy/haproxy.cfg unchanged; only its environment
variables differ from the compose deployment (loopback ports instead of container
names). Run with `scripts/test.sh` or, once the gateway is built and HAProxy installed
(tests/lb/ensure-haproxy.sh), `tests/.venv/bin/python -m pytest tests/lb -v`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Iterator

import httpx2
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))

import support  # noqa: E402  (tests/e2e/support.py: paths, processes, SDK sessions)
from lb_support import LoadBalancer, Replica, StartLoadBalancer  # noqa: E402
from support import ServerProcess  # noqa: E402

HAPROXY_CFG = support.REPO / "deploy" / "haproxy" / "haproxy.cfg"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Appends the output of every process the test started to the report of a failed phase."""
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


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="session")
def haproxy_bin() -> str:
    found = shutil.which("haproxy")
    if not found:
        pytest.fail("haproxy is not installed: run tests/lb/ensure-haproxy.sh (scripts/test.sh does)")
    return found


@pytest.fixture(scope="session")
def mcpgate_bin() -> Path:
    path = support.mcpgate_bin()
    if not path.exists():
        pytest.fail(f"gateway binary {path} not found: build it (`cargo build`) or set MCPGATE_BIN")
    return path


def check_path(replica: Replica) -> str:
    """The health check path: /readyz, or /healthz while the gateway has no /readyz yet."""
    status = httpx2.get(replica.base + "/readyz", timeout=5).status_code
    if status == 404:
        warnings.warn("the gateway has no /readyz yet: HAProxy checks /healthz instead", stacklevel=1)
        return "/healthz"
    return "/readyz"


@pytest.fixture
def redis_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A `redis-server` of the test's own on a free loopback port (no persistence),
    stopped by pid at teardown; its URL."""
    found = shutil.which("redis-server")
    if not found:
        pytest.fail("redis-server is not installed: run tests/cluster/ensure-redis.sh (scripts/test.sh does)")
    port = support.free_port()
    argv = [found, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    proc = ServerProcess("redis", argv, port, tmp_path / "redis.log")
    _register(request, proc)
    proc.wait_for_port()
    yield f"redis://127.0.0.1:{port}/0"
    proc.stop()


@pytest.fixture
def start_lb(
    request: pytest.FixtureRequest, tmp_path: Path, mcpgate_bin: Path, haproxy_bin: str
) -> Iterator[StartLoadBalancer]:
    """Factory: `start_lb(config=DEFAULT_CONFIG, lb_env=None, peers=False, haproxy_cfg=None,
    replica_env=None)` -> LoadBalancer.

    Two gateways (`serve --config CONFIG --listen 127.0.0.1:PORT`; `config` is a Path or
    TOML text; `replica_env` added to their environment) behind HAProxy running the
    shipped haproxy.cfg (or a test's variant of it, `haproxy_cfg`) with loopback ports
    and any extra MCPGATE_LB_* settings in `lb_env`. With `peers`, a second HAProxy instance in
    front of the same replicas shares the stick table with the first through the config's
    `peers` section (`LoadBalancer.peer`). Returns once HAProxy sees both replicas UP.
    Everything is stopped by PID at teardown.
    """
    started: list[Replica | ServerProcess] = []

    def start_haproxy(name: str, replicas: list[Replica], lb_env: dict[str, str], cfg: Path) -> LoadBalancer:
        lb_port, stats_port = support.free_port(), support.free_port()
        env = {
            "MCPGATE_LB_BIND": f"127.0.0.1:{lb_port}",
            "MCPGATE_LB_STATS_BIND": f"127.0.0.1:{stats_port}",
            "MCPGATE_LB_SERVER1": f"127.0.0.1:{replicas[0].port}",
            "MCPGATE_LB_SERVER2": f"127.0.0.1:{replicas[1].port}",
            "MCPGATE_LB_CHECK_PATH": check_path(replicas[0]),
            "MCPGATE_LB_ADMIN_SOCKET": str(tmp_path / f"{name}.sock"),
            **lb_env,
        }
        check = subprocess.run(
            [haproxy_bin, "-c", "-f", str(cfg)], env={**os.environ, **env}, capture_output=True, text=True
        )
        assert check.returncode == 0, f"haproxy -c failed:\n{check.stdout}{check.stderr}"
        # -db: stay in the foreground, logs on stdout (captured to the log file).
        argv = [haproxy_bin, "-db", "-f", str(cfg)]
        haproxy = ServerProcess(name, argv, lb_port, tmp_path / f"{name}.log", env)
        started.append(haproxy)
        _register(request, haproxy)
        haproxy.wait_for_port()
        balancer = LoadBalancer(
            url=f"http://127.0.0.1:{lb_port}/mcp",
            stats=f"http://127.0.0.1:{stats_port}/stats",
            replicas=replicas,
            process=haproxy,
            admin_socket=tmp_path / f"{name}.sock",
        )
        balancer.wait_for_states({"mcpgate-1": "UP", "mcpgate-2": "UP"})
        return balancer

    def start(
        config: Path | str = support.DEFAULT_CONFIG,
        lb_env: dict[str, str] | None = None,
        peers: bool = False,
        haproxy_cfg: Path = HAPROXY_CFG,
        replica_env: dict[str, str] | None = None,
    ) -> LoadBalancer:
        if isinstance(config, str):
            config_path = tmp_path / "mcpgate.toml"
            config_path.write_text(config)
        else:
            config_path = config
        replicas: list[Replica] = []
        for n in (1, 2):
            port = support.free_port()
            argv = [str(mcpgate_bin), "serve", "--config", str(config_path), "--listen", f"127.0.0.1:{port}"]
            proc = ServerProcess(f"mcpgate-{n}", argv, port, tmp_path / f"mcpgate-{n}.log", replica_env)
            replicas.append(Replica(f"mcpgate-{n}", port, proc))
            started.append(replicas[-1])
            _register(request, proc)
        for r in replicas:
            r.process.wait_for_port()

        if not peers:
            return start_haproxy("haproxy", replicas, lb_env or {}, haproxy_cfg)
        peer_env = {
            "MCPGATE_LB_PEER1_NAME": "lb-1",
            "MCPGATE_LB_PEER1_ADDR": f"127.0.0.1:{support.free_port()}",
            "MCPGATE_LB_PEER2_NAME": "lb-2",
            "MCPGATE_LB_PEER2_ADDR": f"127.0.0.1:{support.free_port()}",
        }
        first = start_haproxy(
            "haproxy", replicas, {**peer_env, "MCPGATE_LB_LOCAL_PEER": "lb-1", **(lb_env or {})}, haproxy_cfg
        )
        first.peer = start_haproxy(
            "haproxy-2", replicas, {**peer_env, "MCPGATE_LB_LOCAL_PEER": "lb-2", **(lb_env or {})}, haproxy_cfg
        )
        return first

    yield start
    for item in reversed(started):  # HAProxy first, then the replicas
        item.stop()


@pytest.fixture
def lb(start_lb: StartLoadBalancer) -> LoadBalancer:
    """Two gateways on the shipped default config (demo backend) behind HAProxy, both UP."""
    return start_lb()
