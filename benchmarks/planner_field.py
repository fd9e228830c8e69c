"""The planner against the field's published RL runs: ``benchmarks/data/planner_field.yaml`` → ``planner_field.md``.

Each row is a published run (URL + the quoted figure) expressed as ``--set`` lines over
``recipes/grpo_math_fsdp.yaml``; the planner plans it for the run's GPUs (``check_memory=True``: a refusal of
a run that really ran is a failure) and the ratio is predicted / published step time.

    python benchmarks/planner_field.py            # rewrites benchmarks/planner_field.md
"""

from __future__ import annotations

import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "benchmarks" / "data" / "planner_field.yaml"
BASE = ROOT / "recipes" / "grpo_math_fsdp.yaml"


@dataclass
class FieldRow:
    id: str
    url: str
    quote: str
    gpu: str
    gpus: int
    nodes: int
    measured: float
    sets: list[str]
    predicted: float | None = None
    memory_gib: float | None = None
    refused: str = ""

    @property
    def ratio(self) -> float | None:
        return self.predicted / self.measured if self.predicted else None


def _flat(items: Any) -> list[str]:
    if isinstance(items, list):
        return [s for item in items for s in _flat(item)]
    return [str(items)]


def load() -> tuple[list[FieldRow], float]:
    raw = yaml.safe_load(DATA.read_text(encoding="utf-8"))
    rows = [FieldRow(id=r["id"], url=r["url"], quote=r["quote"], gpu=r["gpu"], gpus=int(r["gpus"]),
                     nodes=int(r.get("nodes", 1)), measured=float(r["measured_step_s"]), sets=_flat(r["sets"]))
            for r in raw["runs"]]
    return rows, float(raw.get("floor_within_2x", 0.0))


def plan_rows(rows: list[FieldRow]) -> list[FieldRow]:
    from gputrain.errors import GputrainError
    from gputrain.planner import make_plan

    for row in rows:
        try:
            plan = make_plan(BASE, gpu=row.gpu, gpus_per_node=row.gpus, nodes=row.nodes, overrides=row.sets)
        except GputrainError as exc:
            row.refused = exc.message
            continue
        row.predicted = plan.estimate.step_seconds
        row.memory_gib = plan.estimate.memory_gib_per_gpu
    return rows


def summary(rows: list[FieldRow]) -> dict[str, float]:
    ratios = [r.ratio for r in rows if r.ratio]
    spread = [max(x, 1 / x) for x in ratios]
    return {"rows": len(rows), "refused": sum(1 for r in rows if r.refused),
            "within_2x": sum(1 for x in spread if x <= 2) / len(rows) if rows else 0.0,
            "median_ratio": statistics.median(ratios) if ratios else 0.0,
            "worst_ratio": max(ratios, key=lambda x: max(x, 1 / x)) if ratios else 0.0}


def markdown(rows: list[FieldRow]) -> str:
    s = summary(rows)
    lines = ["# The planner against the field's published RL runs", "",
             "Written by `python benchmarks/planner_field.py` from `benchmarks/data/planner_field.yaml` (each run as "
             "`--set` lines over `recipes/grpo_math_fsdp.yaml`); checked in CI by `tests/unit/test_planner_field.py`. "
             "Ratio = predicted / published step time.", "",
             f"**{s['rows']} runs: {s['within_2x']:.0%} within 2×, median ratio {s['median_ratio']:.2f}, worst "
             f"{s['worst_ratio']:.2f}, {s['refused']} refused.**", "",
             "| run | GPUs | published step | predicted step | ratio | predicted GiB/GPU | source (quoted) |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        pred = "REFUSED: " + r.refused if r.refused else f"{r.predicted:.0f} s"
        ratio = f"{r.ratio:.2f}" if r.ratio else "-"
        mem = f"{r.memory_gib:.0f}" if r.memory_gib else "-"
        lines.append(f"| {r.id} | {r.nodes}×{r.gpus} {r.gpu} | {r.measured:g} s | {pred} | {ratio} | {mem} | "
                     f"[{r.url.rsplit('/', 3)[-3]}]({r.url}): `{r.quote}` |")
    return "\n".join(lines) + "\n"


def main() -> int:
    rows = plan_rows(load()[0])
    (ROOT / "benchmarks" / "planner_field.md").write_text(markdown(rows), encoding="utf-8")
    print(markdown(rows))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    raise SystemExit(main())
