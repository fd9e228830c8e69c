"""Regenerate ``benchmarks/PLANNER.md``: the planner against the guides, and against measured CPU runs.

    PYTHONPATH=. python3 benchmarks/planner_table.py                       # guide table + every cpu profile
    PYTHONPATH=. python3 benchmarks/planner_table.py --cpu gnn_coloring    # guide table + the named ones
    PYTHONPATH=. python3 benchmarks/planner_table.py --keep-cpu-rows       # guide table only, rows kept

Guide figures are the recipes' ``estimate.guides`` (copied from the guides, see
``../shared/reference/seed-figures.md``). CPU rows: the plan before any run, a real ``gputrain run`` of the
cpu profile (registry in a temporary ``GPUTRAIN_HOME``), the plan after it, then a second run to check the
calibrated plan against a fresh measurement.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
from datetime import date
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from gputrain.planner import make_plan  # noqa: E402

GUIDE_CASES = [  # recipe, gpu, gpus, preset, --set lines: the guide's own setting
    ("gdpo_deepscaler", "B200-192GB", 4, None, []),
    ("gdpo_deepscaler", "B200-192GB", 4, None, ["algorithm.max_completion_length=8192"]),
    ("grpo_code_mbpp", "V100-32GB", 2, None, []),
    ("grpo_math_fsdp", "H100-80GB", 2, None, []),
    ("grpo_math_fsdp", "H100-80GB", 2, None, ["algorithm.rollout_engine=hf"]),
    ("bd3lm_gsm8k", "H200-141GB", 1, "conservative", []),
    ("bd3lm_gsm8k", "H200-141GB", 1, "recommended", []),
    ("bd3lm_gsm8k", "H200-141GB", 1, "aggressive", []),
    ("bd3lm_gsm8k", "H200-141GB", 1, "extreme", []),
    ("hdp_diffusion", "H200-141GB", 1, "recommended", []),
    ("gnn_coloring", "B200-192GB", 8, None, []),
]
CPU_RECIPES = ["gnn_coloring", "bd3lm_gsm8k", "hdp_diffusion", "grpo_code_mbpp", "grpo_math_fsdp", "gdpo_deepscaler"]


def _f(value: float | None, spec: str = ".3g") -> str:
    return "-" if value is None else format(value, spec)


def guide_rows() -> list[str]:
    lines = ["| recipe | hardware | setting | plan step s | guide step s | plan total h | guide total h | "
             "plan GiB/GPU | guide GiB/GPU | time ratio | memory ratio | why different |", "|" + "---|" * 12]
    for name, gpu, gpus, preset, sets in GUIDE_CASES:
        plan = make_plan(REPO / "recipes" / f"{name}.yaml", gpu=gpu, gpus_per_node=gpus, preset=preset,
                         overrides=sets, check_memory=False)
        e, g = plan.estimate, plan.estimate.guide
        setting = ", ".join([*(f"preset {preset}",) * bool(preset), *sets]) or "as written"
        lines.append("| " + " | ".join([
            name, f"{gpus}× {gpu}", setting, _f(e.step_seconds), _f(g.guide_step_seconds if g else None),
            _f(e.total_hours), _f(g.guide_total_hours if g else None), _f(e.memory_gib_per_gpu),
            _f(g.guide_memory_gib if g else None), _f(g.step_ratio if g else None),
            _f(g.memory_ratio if g else None), (g.differs if g and not sets else "") or "",
        ]) + " |")
    return lines


def _cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GPUTRAIN_HOME": str(home), "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "gputrain.cli.main", *args], cwd=home, env=env,
                          capture_output=True, text=True, timeout=1800)


def _plan_json(home: Path, recipe: str) -> dict:
    return json.loads(_cli(home, "plan", recipe, "--gpu", "cpu", "--gpus", "2", "--json").stdout)["estimate"]


def _run_perf(home: Path, recipe: str) -> dict:
    before = set((home / "logs").glob("*")) if (home / "logs").exists() else set()
    proc = _cli(home, "run", recipe, "--gpu", "cpu", "--gpus", "2")
    if proc.returncode != 0:
        raise SystemExit(f"{recipe}: run failed\n{proc.stderr[-2000:]}")
    job = next(iter(set((home / "logs").glob("*")) - before))
    return json.loads((job / "perf.json").read_text())


CPU_HEADER = ["| recipe (cpu profile, 2 ranks) | predicted s/step before | measured run 1 | ratio before | "
              "plan after run 1 | measured run 2 | error after | predicted RSS GiB | measured RSS GiB |",
              "|" + "---|" * 9]


def cpu_row(name: str) -> str:
    """Plan, run, plan again, run again: one table row for ``name``'s cpu profile."""
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        recipe = str(REPO / "recipes" / f"{name}.yaml")
        before = _plan_json(home, recipe)
        first = _run_perf(home, recipe)
        after = _plan_json(home, recipe)
        second = _run_perf(home, recipe)
    p, m1, a, m2 = before["step_seconds"], first["step_seconds"], after["step_seconds"], second["step_seconds"]
    return "| " + " | ".join([
        name, _f(p), _f(m1), _f(p / m1, ".2f"), _f(a), _f(m2), f"{abs(a - m2) / m2:.0%}",
        _f(before["memory_gib_per_gpu"]), _f(max(first["peak_memory_gib"], second["peak_memory_gib"])),
    ]) + " |"


def _machine() -> str:
    import torch

    load = os.getloadavg()
    return (f"{date.today()}, {platform.node()}, {platform.processor() or platform.machine()}, {os.cpu_count()} "
            f"cores, no GPU, torch {torch.__version__}, load average {load[0]:.1f} at the start")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cpu", nargs="*", default=None, help="cpu profiles to run (default: all)")
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "PLANNER.md"))
    parser.add_argument("--keep-cpu-rows", action="store_true",
                        help="rewrite the guide table, keep --out's measured cpu rows (valid while the planner's "
                             "model of those recipes is unchanged)")
    args = parser.parse_args()
    if args.keep_cpu_rows:
        old = Path(args.out).read_text(encoding="utf-8").split("## CPU profiles", 1)
        text = [old[0].split("## Guide figures", 1)[0].rstrip("\n"), "", "## Guide figures (before any calibration)",
                "", *guide_rows(), "", "## CPU profiles" + old[1].rstrip("\n")]
        Path(args.out).write_text("\n".join(text) + "\n", encoding="utf-8")
        print(f"wrote {args.out}")
        return
    names = CPU_RECIPES if args.cpu is None or args.cpu == [] else args.cpu
    head = [f"# Planner vs guides and vs measured runs ({_machine()})", "",
            "Regenerate: `PYTHONPATH=. python3 benchmarks/planner_table.py` (this file is its output; "
            "`--cpu NAME...` runs only the named cpu profiles).", "",
            "## Guide figures (before any calibration)", "", *guide_rows(), "",
            "## CPU profiles: predicted vs measured (real `gputrain run --gpu cpu --gpus 2`)", "",
            "Measured wall time per step on a machine shared with other jobs: the load average is in the title; "
            "a loaded machine makes the measured steps slower than the plan (which assumes the cores are "
            "free) and noisier from run 1 to run 2.", "", *CPU_HEADER]
    rows: list[str] = []
    for name in names:  # written after every row: a long regeneration keeps what it measured
        rows.append(cpu_row(name))
        print(rows[-1], flush=True)
        Path(args.out).write_text("\n".join([*head, *rows, ""]) + "\n", encoding="utf-8")
    if not rows:
        Path(args.out).write_text("\n".join(head) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
