"""The duplicate-execution detector of tests/lb/test_replica_faults.py: a Python `mcp` 2.3
`MCPServer` over stdio whose one tool, `record`, appends its nonce to a file when it starts
running, then optionally sleeps (so that the call is still in flight when a replica is
stopped or killed).

Every process started with the same `REC_FILE` appends to that file (one child per gateway
replica for a `shared` backend). Lines are `nonce pid\n`, each written with one `write` on
an `O_APPEND` descriptor, so lines of several processes never interleave. A nonce on two
lines was executed twice.

Run: `REC_FILE=/path python recorder_server.py` (stdio).
"""

from __future__ import annotations

import os

import anyio
from mcp.server.mcpserver import MCPServer

_fd = os.open(os.environ["REC_FILE"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
server = MCPServer("recorder")


@server.tool()
async def record(nonce: str, ms: int = 0) -> str:
    """Records `nonce` as executed, then waits `ms` milliseconds and answers `recorded NONCE`."""
    os.write(_fd, f"{nonce} {os.getpid()}\n".encode())
    if ms > 0:
        await anyio.sleep(ms / 1000)
    return f"recorded {nonce}"


if __name__ == "__main__":
    server.run()
