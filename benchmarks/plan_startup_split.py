"""Where ``gputrain plan``'s start-up goes, in one process: CPU time of each import and of the plan itself.

    python benchmarks/plan_startup_split.py --runs 7
    python benchmarks/plan_startup_split.py --runs 7 -- recipes/gnn_coloring.yaml --gpu H100 --gpus 2

Each run is a fresh interpreter that imports the libraries and gputrain's layers in the order ``plan``
needs them, timing each step with ``time.process_time``, then imports Typer and the CLI's command table and
plans through it (as ``gputrain plan`` does) with the output thrown away. Prints the median (and minimum) per
step: the part of ``plan`` that is pydantic (the library, its plugin discovery, building the recipe and
plan models) against the part that is gputrain's own work. Whole-process figures: ``plan_startup.sh``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

CHILD = r"""
import contextlib, io, json, sys, time
steps, t = [], time.process_time()
def mark(label):
    global t
    now = time.process_time(); steps.append((label, now - t)); t = now
import pydantic; from pydantic import BaseModel; mark("pydantic (import)")
import importlib.metadata; mark("importlib.metadata (pydantic's plugin discovery)")
import yaml; mark("yaml")
import jinja2; mark("jinja2")
import gputrain.recipe.schema; mark("recipe models (gputrain.recipe.schema)")
import gputrain.contract.plan; mark("plan models (gputrain.contract.plan)")
import gputrain.planner; mark("planner modules")
import gputrain.render, gputrain.cli.plan_output; mark("render and output modules")
from gputrain.cli.app import app; mark("typer and the CLI's command table")
with contextlib.redirect_stdout(io.StringIO()):
    code = app(args=["plan", *sys.argv[1:]], prog_name="gputrain", standalone_mode=False)
assert code in (None, 0), code
mark("plan: parse (typer), load, resolve, estimate, render, print")
print(json.dumps(steps))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("plan_args", nargs="*",
                        default=["recipes/grpo_math_fsdp.yaml", "--gpu", "H100", "--gpus", "2", "--nodes", "2"])
    args = parser.parse_args()
    samples: dict[str, list[float]] = {}
    for _ in range(args.runs + 1):  # the first run warms the page cache and is dropped
        out = subprocess.run([sys.executable, "-c", CHILD, *args.plan_args], capture_output=True, text=True,
                             check=True).stdout
        for label, seconds in json.loads(out):
            samples.setdefault(label, []).append(seconds)
    print(f"{args.runs} runs, load average {os.getloadavg()[0]:.2f}, {sys.executable}; CPU ms median (min)")
    total = 0.0
    for label, values in samples.items():
        kept = values[1:]
        total += statistics.median(kept)
        print(f"{statistics.median(kept) * 1e3:7.1f} ({min(kept) * 1e3:6.1f})  {label}")
    print(f"{total * 1e3:7.1f}           sum of medians (the interpreter's own start-up not included)")


if __name__ == "__main__":
    main()
