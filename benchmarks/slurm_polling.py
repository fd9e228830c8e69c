"""How many Slurm controller calls does following a job cost? (issue #19: `logs -f` asked every 0.5 s)

    PYTHONPATH=. python benchmarks/slurm_polling.py [--seconds 60]

Needs the testbed (scripts/slurm-testbed up). Submits one selftest job that runs ``--seconds``, follows it
with ``gputrain logs -f`` through logging wrappers of squeue/scontrol/sacct placed first on PATH, and prints
the calls per minute of following, and those of one ``gputrain jobs`` over the job plus 3 pending ones.
Results go to benchmarks/RESULTS.md by hand.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOOLS = ("squeue", "scontrol", "sacct", "sstat")


def wrappers(folder: Path, log: Path) -> Path:
    """Scripts named like the Slurm clients that log their argv, then run the real one."""
    bin_dir = folder / "bin"
    bin_dir.mkdir()
    for tool in TOOLS:
        real = shutil.which(tool)
        if real is None:
            continue
        script = bin_dir / tool
        script.write_text(f'#!/bin/sh\necho "{tool} $*" >> "{log}"\nexec "{real}" "$@"\n')
        script.chmod(0o755)
    return bin_dir


def gputrain(folder: Path, *args: str, path: str | None = None, timeout: float = 600) -> str:
    env = {**os.environ, "GPUTRAIN_HOME": str(folder / "home"), "PYTHONPATH": str(ROOT),
           "GPUTRAIN_CONFIG": str(folder / "none.yaml")}
    if path:
        env["PATH"] = path
    proc = subprocess.run([sys.executable, "-m", "gputrain.cli.main", *args], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise SystemExit(proc.stderr)
    return proc.stdout


def count(log: Path) -> dict[str, int]:
    lines = log.read_text().splitlines() if log.exists() else []
    return {tool: sum(ln.startswith(tool + " ") for ln in lines) for tool in TOOLS}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=60.0)
    ns = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="gputrain-polling-"))
    log = folder / "calls.log"
    path = f"{wrappers(folder, log)}:{os.environ['PATH']}"
    recipe = str(ROOT / "recipes" / "selftest.yaml")
    base = ["submit", recipe, "--cluster", "testbed", "--gpu", "cpu", "--gpus", "1", "--json"]
    job = json.loads(gputrain(folder, *base, "--set", "train.max_steps=10",
                              "--set", f"algorithm.sleep_seconds={ns.seconds}"))["job_id"]
    pending = [json.loads(gputrain(folder, *base, "--begin", "now+1hours"))["job_id"] for _ in range(3)]
    try:
        log.unlink(missing_ok=True)
        gputrain(folder, "jobs", path=path)
        jobs_calls = count(log)
        log.unlink(missing_ok=True)
        start = time.monotonic()
        gputrain(folder, "logs", "-f", job, path=path, timeout=ns.seconds + 600)
        minutes = (time.monotonic() - start) / 60
        follow = count(log)
    finally:
        for j in [job, *pending]:
            subprocess.run(["scancel", "--", j], capture_output=True)
        shutil.rmtree(folder, ignore_errors=True)
    per_min = {k: round(v / minutes, 1) for k, v in follow.items() if v}
    print(f"jobs (1 running + 3 pending): {jobs_calls}")
    print(f"logs -f for {minutes:.2f} min: {follow} -> per minute {per_min}")


if __name__ == "__main__":
    main()
