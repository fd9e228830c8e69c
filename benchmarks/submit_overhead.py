"""`gputrain submit` overhead over raw `sbatch` of the same script, N jobs each, on the Slurm testbed.

    scripts/slurm-testbed up
    python benchmarks/submit_overhead.py --jobs 50

Both sides are whole processes as a user types them. gputrain's side plans the recipe, renders the script,
writes the job folder, runs sinfo (GRES check), sbatch --hold, renames the folder, records the job and
releases it; raw sbatch submits the rendered job.sbatch. The jobs carry `--begin=now+1hour` (a bench
cluster profile's sbatch_extra) so nothing runs, and are cancelled at the end. Goal: <= +150 ms per job.

Two ways to submit N jobs:
- `repeat`: N separate commands (the same one N times), each planning and rendering its job, as every
  submit does (the replay cache that once skipped planning for an identical command is gone; see
  benchmarks/RESULTS.md for the figures behind that decision);
- `sweep`: one command, `--sweep train.seed=0,1,...,N-1`, against N raw sbatch calls; the figure is the
  whole gputrain process divided by N.
gputrain runs as users run it: the `gputrain` script installed beside this Python, else `python -m`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROFILE = (
    "bench:\n  gpu: V100-32GB\n  gpus_per_node: 2\n  gres_type: volta\n  partition: debug\n"
    "  max_time: '00:10:00'\n  sbatch_extra: ['--begin=now+3600']\n"
)


def timed(cmd: list[str], env: dict[str, str], cwd: Path) -> tuple[float, str]:
    start = time.perf_counter()
    proc = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{cmd[0]} failed: {proc.stderr.strip()}")
    return elapsed, proc.stdout


def summary(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {"median_ms": statistics.median(ordered) * 1e3, "mean_ms": statistics.fmean(ordered) * 1e3,
            "p90_ms": ordered[int(0.9 * (len(ordered) - 1))] * 1e3}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=50)
    parser.add_argument("--mode", choices=("repeat", "sweep"), default="repeat")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="gputrain-bench-"))
    (work / "clusters.yaml").write_text(PROFILE)
    env = {**os.environ, "GPUTRAIN_HOME": str(work / "home"), "GPUTRAIN_CONFIG": str(work / "clusters.yaml")}
    recipe = str(ROOT / "recipes" / "selftest.yaml")
    script_path = Path(sys.executable).with_name("gputrain")
    cli = [str(script_path)] if script_path.is_file() else [sys.executable, "-m", "gputrain.cli.main"]
    submit = [*cli, "submit", recipe, "--cluster", "bench", "--json"]
    if args.mode == "sweep":
        return sweep(submit, args.jobs, env, work)

    ids: list[str] = []
    gputrain_s: list[float] = []
    sbatch_s: list[float] = []
    script = None
    try:
        for _ in range(args.jobs):  # interleaved, so load changes hit both sides alike
            seconds, out = timed(submit, env, work)
            gputrain_s.append(seconds)
            info = json.loads(out)
            ids.append(info["job_id"])
            script = script or Path(info["job_dir"]) / "job.sbatch"
            sbatch_s.append(raw_sbatch(script, env, work, ids))
    finally:
        cancel(ids)
    g, s = summary(gputrain_s), summary(sbatch_s)
    result = {
        "jobs": args.jobs, "mode": args.mode, "gputrain_submit": g, "raw_sbatch": s,
        "overhead_median_ms": g["median_ms"] - s["median_ms"], "overhead_mean_ms": g["mean_ms"] - s["mean_ms"],
    }
    print(json.dumps(result, indent=2))


def raw_sbatch(script: Path, env: dict[str, str], work: Path, ids: list[str]) -> float:
    """Seconds one plain `sbatch` of ``script`` takes; its job id goes to ``ids`` for cleanup."""
    seconds, out = timed(["sbatch", "--parsable", str(script)], env, work)
    ids.append(out.strip().split(";")[0])
    return seconds


def cancel(ids: list[str]) -> None:
    for i in range(0, len(ids), 100):
        subprocess.run(["scancel", *ids[i:i + 100]], check=False)


def sweep(submit: list[str], jobs: int, env: dict[str, str], work: Path) -> None:
    ids: list[str] = []
    sbatch_s: list[float] = []
    try:
        seconds, out = timed([*submit, "--sweep", "train.seed=" + ",".join(map(str, range(jobs)))], env, work)
        rows = json.loads(out)
        ids += [r["job_id"] for r in rows]
        script = Path(rows[0]["job_dir"]) / "job.sbatch"
        sbatch_s = [raw_sbatch(script, env, work, ids) for _ in range(jobs)]
    finally:
        cancel(ids)
    per_job, s = seconds / jobs * 1e3, summary(sbatch_s)
    print(json.dumps({"jobs": jobs, "mode": "sweep", "gputrain_total_ms": seconds * 1e3,
                      "gputrain_per_job_ms": per_job, "raw_sbatch": s,
                      "overhead_per_job_ms": per_job - s["mean_ms"]}, indent=2))


if __name__ == "__main__":
    main()
