#!/usr/bin/env python3
"""Counts the checks of one `conformance server --requirements REV` run (scripts/conformance.sh).

    conformance_tally.py RESULTS_DIR SUITE_LOG SCORED_LIST

RESULTS_DIR  the run's -o directory: one `server-<scenario>-<timestamp>/checks.json` per scenario
SUITE_LOG    the suite's stdout (read for the baseline entries it reports as expected failures,
             the `  ~ <scenario>` / `  ~ <scenario>:<check-id>` lines)
SCORED_LIST  `conformance list --server --requirements REV` output (the scenarios it scores)

Prints one line `P F E` on stdout: checks that passed (SUCCESS), failed (FAILURE or WARNING,
as the suite's baseline logic counts them, not covered by the baseline) and failed as
expected (covered by the baseline), over the scored scenarios only; scenarios the revision
runs but never scores (extensions, pending) are left out, as they are of the suite's verdict.
Then, on stderr, each unexpected failing check as `scenario:check-id: message`.
Stdlib only; exit 2 on unreadable input.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

FAILING = {"FAILURE", "WARNING"}
TIMESTAMP = re.compile(r"-\d{4}-\d{2}-\d{2}T[\d-]+Z$")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def scored(listing: str) -> set[str]:
    """The `  - name` lines under "Server scenarios", up to the next blank line."""
    names: set[str] = set()
    inside = False
    for line in listing.splitlines():
        if line.startswith("Server scenarios"):
            inside = True
        elif inside and not line.strip():
            break
        elif inside and line.strip().startswith("- "):
            names.add(line.strip()[2:].strip())
    return names


def expected(log: str) -> tuple[set[str], set[tuple[str, str]]]:
    """Whole-scenario and per-check baseline entries the suite reported as expected failures."""
    scenarios: set[str] = set()
    checks: set[tuple[str, str]] = set()
    inside = False
    for raw in log.splitlines():
        line = ANSI.sub("", raw)
        if line.startswith("Expected failures"):
            inside = True
            continue
        if inside and line.startswith("  ~ "):
            entry = line[4:].strip()
            if ":" in entry:
                scenario, check = entry.split(":", 1)
                checks.add((scenario, check))
            else:
                scenarios.add(entry)
        elif inside:
            inside = False
    return scenarios, checks


def main(argv: list[str]) -> int:
    if len(argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    results, log_path, list_path = Path(argv[1]), Path(argv[2]), Path(argv[3])
    try:
        wanted = scored(list_path.read_text())
        whole, per_check = expected(log_path.read_text(errors="replace"))
        runs = sorted(results.glob("server-*/checks.json"))
    except OSError as e:
        print(f"conformance_tally: {e}", file=sys.stderr)
        return 2
    passed = failed = known = 0
    for path in runs:
        scenario = TIMESTAMP.sub("", path.parent.name.removeprefix("server-"))
        if scenario not in wanted:
            continue
        for check in json.loads(path.read_text()):
            status = check.get("status")
            if status == "SUCCESS":
                passed += 1
            elif status in FAILING:
                if scenario in whole or (scenario, check.get("id")) in per_check:
                    known += 1
                else:
                    failed += 1
                    message = (check.get("errorMessage") or check.get("description") or "").splitlines()
                    print(f"{scenario}:{check.get('id')}: {message[0] if message else status}", file=sys.stderr)
    print(passed, failed, known)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
