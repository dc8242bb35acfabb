"""The config files the project ships or the test scripts use pass `mcpgate check-config`."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

import support

pytestmark = pytest.mark.timeout(30)

CONFIGS = [
    support.DEFAULT_CONFIG,
    support.CONFIGS / "conformance-stdio.toml",
    support.CONFIGS / "conformance-stdio-default.toml",
    support.CONFIGS / "conformance-http.toml",
]


@pytest.mark.parametrize("config", CONFIGS, ids=lambda p: p.name)
def test_check_config_accepts(mcpgate_bin: Path, config: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "MCPGATE_CONFORMANCE_DEMO_URL": "http://127.0.0.1:9/mcp"}
    proc = subprocess.run(
        [str(mcpgate_bin), "check-config", "--config", str(config)],
        cwd=support.REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=20,
        check=False,
    )
    assert proc.returncode == 0, f"check-config rejected {config}:\n{proc.stdout}\n{proc.stderr}"


def test_check_config_finds_the_file_as_serve_does(mcpgate_bin: Path, tmp_path: Path) -> None:
    """Outside the repository `check-config` checks the embedded
    default (as `serve` serves it), and it honours MCPGATE_CONFIG."""
    run = lambda env: subprocess.run(  # noqa: E731
        [str(mcpgate_bin), "check-config"],
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", **env},
        capture_output=True,
        text=True,
        timeout=20,
        check=False,
    )
    proc = run({})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("embedded default: ok"), proc.stdout
    bad = tmp_path / "bad.toml"
    bad.write_text('[backends.empty]\ntype = "stdio"\ncommand = ""\n')
    proc = run({"MCPGATE_CONFIG": str(bad)})
    assert proc.returncode == 1, proc.stdout
    assert "backends.empty.command" in proc.stdout, proc.stdout
