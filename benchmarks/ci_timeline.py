"""Each pytest worker's chain of tests, from the lines ``GPUTRAIN_TEST_TIMELINE=DIR pytest ...`` wrote (#26).

The wall time of ``pytest -n N --dist loadgroup`` is the end of the worker that finishes last; this says which
one that was, what it ran (serial groups as one span), and its longest tests, so a cut goes where it shortens
the run rather than where a test is merely long.

    GPUTRAIN_TEST_TIMELINE=/tmp/tl scripts/check --durations=80
    python3 benchmarks/ci_timeline.py /tmp/tl [--top 12]
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path
from typing import Any


def load(folder: Path) -> list[dict[str, Any]]:
    rows = []
    for path in sorted(folder.glob("*.jsonl")):
        rows += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return rows


def mostly_waiting(rows: list[dict[str, Any]], waiting_groups: set[str], least_s: float = 5.0) -> list[str]:
    """Tests outside the waiting groups that held a CPU slot while using little CPU: candidates to run beside
    the slots instead. A test's CPU here is pytest's process and the children it reaped (a forked CLI call is
    reaped by the zygote, so a test made of many CLI calls reads low: check before moving one)."""
    lines = []
    for row in sorted(rows, key=lambda r: r["start"] - r["end"]):
        wall = row["end"] - row["start"]
        if row["group"] not in waiting_groups and wall >= least_s and row["cpu"] < 0.35 * wall:
            lines.append(f"    {wall:7.1f} s  {row['cpu']:6.1f} CPU-s  {row['worker']}  {row['test']}")
    return lines


def report(rows: list[dict[str, Any]], top: int) -> str:
    t0 = min(r["start"] for r in rows)
    by_worker: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        by_worker[row["worker"]].append(row)
    lines = []
    for worker, tests in sorted(by_worker.items(), key=lambda kv: -max(r["end"] for r in kv[1])):
        tests.sort(key=lambda r: r["start"])
        busy = sum(r["end"] - r["start"] for r in tests)
        end = max(r["end"] for r in tests) - t0
        lines.append(f"{worker}: {len(tests)} tests, {tests[0]['start'] - t0:.0f} -> {end:.0f} s "
                     f"({busy:.0f} s in tests, {sum(r['cpu'] for r in tests):.0f} CPU-s in pytest's process)")
        spans: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for row in tests:
            spans[row["group"] or "(ungrouped)"].append(row)
        for group, members in sorted(spans.items(), key=lambda kv: kv[1][0]["start"]):
            lines.append(f"  {group}: {len(members)} tests, {members[0]['start'] - t0:.0f} -> "
                         f"{members[-1]['end'] - t0:.0f} s, {sum(r['end'] - r['start'] for r in members):.0f} s")
        for row in sorted(tests, key=lambda r: r["start"] - r["end"])[:top]:
            lines.append(f"    {row['end'] - row['start']:7.1f} s  {row['cpu']:6.1f} CPU-s  {row['test']}")
    waiting = mostly_waiting(rows, {"slurm_testbed", "loopback_sshd"})
    if waiting:
        lines += ["CPU-slot tests that mostly waited (CPU < 35 % of wall, over 5 s):", *waiting]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--top", type=int, default=10, help="longest tests shown per worker")
    args = parser.parse_args()
    print(report(load(args.folder), args.top))


if __name__ == "__main__":
    main()
