"""How ``gputrain plan`` shows a plan: plain aligned text on stdout (warnings are the caller's, on stderr)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gputrain.atomic import write_atomic
from gputrain.contract.plan import JobPlan
from gputrain.errors import PlanError
from gputrain.planner import make_plan

_SETTINGS = (
    ("train.batch_size", "per-GPU batch"),
    ("train.grad_accum", "grad accumulation"),
    ("train.learning_rate", "learning rate"),
    ("train.precision", "precision"),
    ("train.attention", "attention"),
    ("train.gradient_checkpointing", "grad checkpointing"),
    ("train.max_steps", "max steps"),
    ("train.epochs", "epochs"),
    ("memory.vllm_gpu_memory_utilization", "vLLM memory share"),
    ("distributed.strategy", "strategy"),
    ("resources.time", "time limit"),
)


def _get(config: dict[str, Any], dotted: str) -> Any:
    value: Any = config
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def _source(plan: JobPlan, dotted: str) -> str:
    if dotted in ("train.precision", "train.attention"):
        return "resolved for " + plan.gpu.name
    if dotted == "train.learning_rate":
        return plan.lr_note
    return plan.provenance.get(dotted, "default")


def print_plan(plan: JobPlan, *, show_scripts: bool) -> None:
    config = plan.recipe.model_dump(mode="json")
    where = f" on cluster {plan.cluster.name}" if plan.cluster else ""
    print(f"{plan.recipe.name}: {plan.nodes} node(s) × {plan.gpus_per_node} × {plan.gpu.name}{where} "
          f"(target {plan.target})")
    print(f"  profile: {plan.profile or '-'}   preset: {plan.preset or '-'}   global batch: "
          f"{plan.global_batch_size}")
    print("\nsettings")
    for dotted, label in _SETTINGS:
        value = _get(config, dotted)
        if value is None:
            continue
        if isinstance(value, float):
            value = f"{value:.4g}"
        print(f"  {label:<20} {value!s:<12} {_source(plan, dotted)}")
    secrets = list(plan.recipe.secrets)
    print(f"  {'secrets (by name)':<20} {', '.join(secrets) if secrets else 'none'}   read from the environment "
          "when the job runs; never written to a script")
    est = plan.estimate
    print("\nestimate")
    if est.memory_gib_per_gpu is not None:
        parts = ", ".join(f"{k} {round(v, 2):g}" for k, v in est.memory_breakdown.items())
        cap = f" of {est.capacity_gib:g}" if est.capacity_gib else ""
        print(f"  memory per GPU       {round(est.memory_gib_per_gpu, 2):g}{cap} GiB ({parts})")
    if est.step_seconds is not None:
        print(f"  step time            {est.step_seconds:.3g} s at {est.mfu * 100:.2g}% MFU")
    if est.total_steps is not None:
        print(f"  steps                {est.total_steps}")
    hours = est.total_hours
    if hours is not None:
        shown = f"{hours:.3g} h" if hours >= 1 else f"{hours * 60:.3g} min"
        print(f"  wall time            {shown}")
    if est.cost_usd is not None:
        print(f"  cost                 ${est.cost_usd:,.2f} ({plan.world_size} GPUs × "
              f"${est.gpu_hourly_usd:g}/GPU-hour; {plan.gpu.price_source})")
    for name, text in plan.artifacts.items():
        if show_scripts:
            print(f"\n# ---- {name} ----")
            print(text.rstrip("\n"))
        else:
            print(f"wrote {text}")





def write_outputs(plan: JobPlan, artifacts: dict[str, str], out: Path) -> dict[str, str]:
    """Write scripts, ``plan.json`` and ``recipe.resolved.yaml``; returns {name: path}."""
    import yaml

    written: dict[str, str] = {}
    for name, text in artifacts.items():
        path = out / name
        write_atomic(path, text, 0o755 if name.endswith(".sh") or name.endswith(".sbatch") else 0o644)
        written[name] = str(path)
    resolved = out / "recipe.resolved.yaml"
    write_atomic(resolved, yaml.safe_dump(plan.resolved_recipe_data(), sort_keys=False))
    written["recipe.resolved.yaml"] = str(resolved)
    plan_path = out / "plan.json"
    saved = plan.model_copy(update={"artifacts": {**written, "plan.json": str(plan_path)}})
    write_atomic(plan_path, saved.to_json())
    written["plan.json"] = str(plan_path)
    return written


def _rounded(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def print_compare(path: Path, gpu: str | None, kwargs: dict[str, Any], *, as_json: bool) -> None:
    from gputrain.hardware.catalog import catalog, get_gpu

    names = [g.name for g in catalog().values() if not g.is_cpu]
    if gpu:
        first = get_gpu(gpu).name
        names.remove(first)
        names.insert(0, first)
    rows: list[dict[str, Any]] = []
    for name in names:
        try:
            plan = make_plan(path, gpu=name, check_memory=False, **{**kwargs, "cluster": None})
        except PlanError as exc:
            rows.append({"gpu": name, "error": exc.message})
            continue
        est = plan.estimate
        rows.append({
            "gpu": name, "profile": plan.profile, "preset": plan.preset, "precision": plan.precision,
            "attention": plan.attention, "batch_per_gpu": plan.recipe.train.batch_size,
            "global_batch_size": plan.global_batch_size, "learning_rate": plan.learning_rate,
            "memory_gib_per_gpu": _rounded(est.memory_gib_per_gpu, 2), "fits": est.fits,
            "step_seconds": _rounded(est.step_seconds, 4), "total_hours": _rounded(est.total_hours, 3),
            "cost_usd": _rounded(est.cost_usd, 2),
        })
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    from gputrain.cli.output import print_table

    def fmt(v: Any, spec: str) -> str:
        return "-" if v is None else format(v, spec)

    table = []
    for r in rows:
        if "error" in r:
            table.append([r["gpu"], f"error: {r['error']}", *[""] * 10])
            continue
        table.append([r["gpu"], r["profile"], r["precision"], r["attention"], r["batch_per_gpu"],
                      r["global_batch_size"], fmt(r["learning_rate"], ".3g"), fmt(r["memory_gib_per_gpu"], ".1f"),
                      "yes" if r["fits"] else "NO", fmt(r["step_seconds"], ".3g"), fmt(r["total_hours"], ".3g"),
                      fmt(r["cost_usd"], ",.0f")])
    print_table(["GPU", "profile", "prec", "attn", "batch", "global", "LR", "GiB/GPU", "fits", "step s", "hours",
                 "cost $"], table)
