"""The GNN colouring family table: the network alone, network- vs random-seeded Tabucol, DSATUR, largest-first.

    python benchmarks/gnn_family_table.py --train --write          # train the cpu profile, then the table
    python benchmarks/gnn_family_table.py JOB_DIR --write          # a finished job's best_model.pt
    python benchmarks/gnn_family_table.py JOB_DIR --eval-graphs 200 --search-moves 10000

Scores the held-out test split (never seen in training or model selection) and the benchmark graphs with
``gputrain.train.gnn_coloring.evaluate`` (the code the trainer's report runs), prints a Markdown table and
with ``--write`` replaces the GNN section of ``benchmarks/RESULTS.md`` (between the gnn-family-table
markers) with it, the machine and the date.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "RESULTS.md"
START, END = "<!-- gnn-family-table:start -->", "<!-- gnn-family-table:end -->"


def train_cpu_profile(logs: Path) -> Path:
    """``gputrain run recipes/gnn_coloring.yaml --gpu cpu --gpus 2``: the job folder it wrote."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "GPUTRAIN_HOME": str(logs / "home")}
    cmd = [sys.executable, "-m", "gputrain.cli.main", "run", str(ROOT / "recipes" / "gnn_coloring.yaml"),
           "--gpu", "cpu", "--gpus", "2", "--logs-dir", str(logs / "jobs")]
    subprocess.run(cmd, check=True, env=env, cwd=logs)
    (job,) = (logs / "jobs").iterdir()
    return job


def load_job(job: Path, overrides: dict[str, Any]) -> tuple[Any, Any, dict[str, Any]]:
    import torch

    from gputrain.recipe.algorithms.gnn_coloring import GNNColoringAlgorithm
    from gputrain.train.gnn_coloring.graphs import feature_dim
    from gputrain.train.gnn_coloring.model import ColoringGNN

    plan = json.loads((job / "plan.json").read_text())
    config = plan.get("recipe") or plan["config"]  # "config" in plans written before the typed plan contract
    known = GNNColoringAlgorithm.model_fields  # a job of an older version may carry settings since removed
    algo = {k: v for k, v in config.get("algorithm", {}).items() if k in known and v is not None}
    settings = GNNColoringAlgorithm.model_validate({**algo, **overrides})
    net = ColoringGNN(
        feature_dim(settings.random_features),
        int(config["model"]["hidden_size"]),
        int(config["model"]["num_layers"]),
        settings.num_colors,
        chromatic_head=settings.chromatic_head,
    )
    net.load_state_dict(torch.load(job / "best_model.pt", map_location="cpu"))
    result = json.loads((job / "result.json").read_text()) if (job / "result.json").is_file() else {}
    return net.eval(), settings, result


def _triple(c: dict[str, int]) -> str:
    return f"{c['fewer']}/{c['same']}/{c['more']}"


def markdown(out: dict[str, Any], settings: Any, job: Path, trained: dict[str, Any], seconds: float) -> str:
    rows = [
        "| family | graphs | q from | network alone: conflicts/edge at q (random 1/q) | network proper at q "
        "| network-seeded Tabucol | random-seeded Tabucol | DSATUR | largest-first | lower bound "
        "| net-seeded vs DSATUR (fewer/same/more) | vs random-seeded: colours (f/s/m) "
        "| moves to proper at q, median net / random | moves (f/s/m) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for family in ("planted", "erdos_renyi", "mycielski", "queen"):
        s = out["summary"].get(family)
        if not s or not s.get("graphs"):
            continue
        rows.append(
            f"| {family} | {s['graphs']} | {', '.join(s['q_source'])} "
            f"| {s['network_conflicts_per_edge']:.3f} ({s['random_conflicts_per_edge']:.3f}) "
            f"| {s['network_proper_share']:.0%} | {s['colours_network_search']:.2f} | {s['colours_random_search']:.2f} "
            f"| {s['colours_dsatur']:.2f} | {s['colours_largest_first']:.2f} | {s['colours_lower_bound']:.2f} "
            f"| {_triple(s['network_search_vs_dsatur'])} | {_triple(s['network_search_vs_random_search'])} "
            f"| {s['moves_network_search_median']:.0f} / {s['moves_random_search_median']:.0f} "
            f"| {_triple(s['network_search_moves_vs_random_search'])} |"
        )
    g = out["goals"]
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    lines = [
        "## GNN colouring: family table (GNN issue)",
        f"`python benchmarks/gnn_family_table.py {job.name if job.name else job} --eval-graphs "
        f"{settings.eval_graphs} --search-moves {settings.search_moves}` on {platform.node() or 'this machine'} "
        f"({os.cpu_count()} cores, {platform.platform()}, Python {platform.python_version()}), "
        f"{dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC, load average {load:.1f}; {seconds:.0f} s.",
        f"Model: the `cpu` profile of `recipes/gnn_coloring.yaml` ({trained.get('steps', '?')} steps, best "
        f"validation Potts loss {trained.get('best_val_loss', float('nan')):.4f} at step "
        f"{trained.get('best_step', '?')}, picked on the validation split). Scored: {settings.eval_graphs} "
        f"held-out test-split graphs ({settings.min_nodes}-{settings.max_nodes} nodes) and the benchmark graphs; "
        f"Tabucol {settings.search_moves} moves per q, the same seed for both starts. Colour columns are means.",
        "",
        *rows,
        "",
        f"Goals: network-seeded search uses no more colours than DSATUR on "
        f"**{g['planted_no_more_than_dsatur_share']:.0%}** of planted graphs (goal 80 %); strictly fewer on "
        f"average on **{', '.join(g['families_fewer_than_dsatur']) or 'no family'}**; beats the random-seeded "
        f"search: **{'yes' if g['beats_random_search'] else 'no'}** overall (colours "
        f"{_triple(g['network_search_vs_random_search'])}, "
        f"moves {_triple(g['network_search_moves_vs_random_search'])}), "
        f"per family: {', '.join(g['families_beating_random_search']) or 'none'}.",
        "",
        "| benchmark | χ | nodes | edges | network conflicts at χ | net-seeded | random-seeded | DSATUR "
        "| largest-first |",
        "|---|---|---|---|---|---|---|---|---|",
        *[
            f"| {b['name']} | {b['chi']} | {b['nodes']} | {b['edges']} | {b['network_conflicts']} "
            f"| {b['colours_network_search']} | {b['colours_random_search']} | {b['colours_dsatur']} "
            f"| {b['colours_largest_first']} |"
            for b in out["benchmarks"]
        ],
    ]
    return "\n".join(lines)


def write_section(text: str, path: Path = RESULTS) -> None:
    """Replace the marked section (or append it), through a temporary file and a rename."""
    old = path.read_text() if path.is_file() else "# Benchmark results\n"
    block = f"{START}\n{text}\n{END}"
    if START in old and END in old:
        head, rest = old.split(START, 1)
        new = head + block + rest.split(END, 1)[1]
    else:
        new = old.rstrip("\n") + "\n\n" + block + "\n"
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(new)
    os.replace(tmp, path)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("job", nargs="?", type=Path, help="job folder with plan.json and best_model.pt")
    ap.add_argument("--train", action="store_true", help="train the cpu profile first (about a minute)")
    ap.add_argument("--eval-graphs", type=int, help="held-out test graphs (default: the job's setting)")
    ap.add_argument("--search-moves", type=int, help="Tabucol moves per q (default: the job's setting)")
    ap.add_argument("--write", action="store_true", help=f"replace the section in {RESULTS.relative_to(ROOT)}")
    args = ap.parse_args()
    if (args.job is None) == (not args.train):
        print("error: give a job folder or --train (not both)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        job = train_cpu_profile(Path(tmp)) if args.train else args.job
        if not (job / "best_model.pt").is_file() or not (job / "plan.json").is_file():
            print(f"error: {job} has no best_model.pt and plan.json", file=sys.stderr)
            return 2
        overrides = {k: v for k, v in (("eval_graphs", args.eval_graphs), ("search_moves", args.search_moves)) if v}
        net, settings, trained = load_job(job, overrides)
        import torch

        from gputrain.train.gnn_coloring.evaluate import report

        torch.set_num_threads(1)
        t0 = time.time()
        out = report(net, settings, torch.device("cpu"))
        text = markdown(out, settings, job if not args.train else Path("--train"), trained, time.time() - t0)
    print(text)
    if args.write:
        write_section(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
