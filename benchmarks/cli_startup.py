"""Whole-process start-up of ``gputrain --help`` (and a bare interpreter), medians of N interleaved runs.

    python benchmarks/cli_startup.py --runs 21
    python benchmarks/cli_startup.py --runs 21 --checkout before=/tmp/old-main --checkout after=.

Runs the ``gputrain`` script installed beside this Python, as users run it; each ``--checkout`` is put on
PYTHONPATH so two trees can be compared A/B with the same interpreter, interleaved run by run so a change
in the machine's load hits every variant alike. Reports wall time and the child's CPU time (user+sys),
which a shared machine's load inflates less. Goal (issue #13): well under 0.3 s.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path


def run_once(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed: {proc.stderr.decode()[-500:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=21)
    parser.add_argument("--checkout", action="append", default=[], metavar="LABEL=PATH",
                        help="a source tree to put on PYTHONPATH (repeatable); default: the installed gputrain")
    args = parser.parse_args()
    script = Path(sys.executable).with_name("gputrain")
    cli = [str(script)] if script.is_file() else [sys.executable, "-m", "gputrain"]
    variants: list[tuple[str, list[str], dict[str, str]]] = [("python -c pass", [sys.executable, "-c", "pass"],
                                                              dict(os.environ))]
    for spec in args.checkout or ["installed="]:
        label, _, path = spec.partition("=")
        env = {**os.environ, "PYTHONPATH": str(Path(path).resolve())} if path else dict(os.environ)
        variants.append((f"{label}: gputrain --help", [*cli, "--help"], env))
    samples: dict[str, list[tuple[float, float]]] = {label: [] for label, _, _ in variants}
    for i in range(args.runs + 1):  # the first round warms the caches and is dropped
        for label, cmd, env in variants:
            result = run_once(cmd, env)
            if i:
                samples[label].append(result)
    print(f"{args.runs} runs each, interleaved; load average {os.getloadavg()[0]:.2f}; {sys.executable}")
    for label, rows in samples.items():
        wall = sorted(r[0] for r in rows)
        cpu = sorted(r[1] for r in rows)
        print(f"{label:<32} wall median {statistics.median(wall) * 1e3:6.1f} ms (min {wall[0] * 1e3:5.1f})   "
              f"CPU median {statistics.median(cpu) * 1e3:6.1f} ms")


if __name__ == "__main__":
    main()
