"""How ``gputrain plan`` shows a plan: plain aligned text on stdout (warnings are the caller's, on stderr)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gputrain.atomic import write_atomic
from gputrain.contract.plan import JobPlan
from gputrain.errors import PlanError
from gputrain.planner import make_plan
from gputrain.recipe.algorithms.grpo import GRPOAlgorithm

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
    ("memory.sglang_mem_fraction_static", "SGLang memory share"),
    ("distributed.strategy", "strategy"),
    ("resources.time", "time limit"),
)


def _get(config: dict[str, Any], dotted: str) -> Any:
    value: Any = config
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def _source(plan: JobPlan, dotted: str) -> str:
    if dotted == "train.attention" and plan.attention == "auto":
        if plan.kernels is not None:  # the resolver's decision, the one the step time was planned with
            return f"resolved for {plan.gpu.name}: {plan.kernels.label()} ({plan.kernels.reason})"
        return "resolved on the node: flash-attn if installed there and supported, else sdpa"
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
    algo = plan.recipe.algorithm
    if plan.estimate.workload == "rl" and isinstance(algo, GRPOAlgorithm):
        prompts = algo.train_batch_size or plan.world_size * max(1, plan.recipe.train.batch_size //
                                                                 algo.num_generations)
        batch = (f"step batch: {prompts} prompts × {algo.num_generations} completions, micro-batch "
                 f"{plan.recipe.train.batch_size} per GPU")
    else:
        batch = f"global batch: {plan.global_batch_size}"
    print(f"  profile: {plan.profile or '-'}   preset: {plan.preset or '-'}   {batch}")
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
    print_estimate(plan)
    for name, text in plan.artifacts.items():
        if show_scripts:
            print(f"\n# ---- {name} ----")
            print(text.rstrip("\n"))
        else:
            print(f"wrote {text}")





def _duration(hours: float) -> str:
    return f"{hours:.3g} h" if hours >= 1 else f"{hours * 60:.3g} min"


def percent(fraction: float) -> str:
    """``38%``, ``0.2%``: a small share keeps its first digit instead of rounding to a misleading 0%."""
    pct = 100 * fraction
    return f"{pct:.0f}%" if pct >= 1 or pct == 0 else f"{pct:.2g}%"


def print_estimate(plan: JobPlan) -> None:
    """The estimate: step split, memory terms with their knobs, guide and measured runs side by side."""
    est = plan.estimate
    print(f"\nestimate ({est.workload} model)")
    if est.step_seconds is not None:
        split = ", ".join(f"{k} {v:.3g}" for k, v in est.phases.items())
        spread = (f"; range {est.step_range_seconds[0]:.3g}-{est.step_range_seconds[1]:.3g} s"
                  if est.step_range_seconds else "")
        print(f"  step time            {est.step_seconds:.3g} s ({split}{spread})")
        if est.peak_bound_seconds:
            assumed = " (estimate.mfu: assumed)" if "mfu" in plan.recipe.estimate.model_fields_set else ""
            print(f"  at dense peak        {est.peak_bound_seconds:.3g} s ({est.step_flops:.3g} FLOPs; compute at "
                  f"{percent(est.mfu)} MFU{assumed})")
    if est.total_steps is not None:
        print(f"  steps                {est.total_steps}")
    if est.total_hours is not None:
        extra = f" incl. {est.overhead_seconds / 60:.2g} min start-up/eval/report" if est.overhead_seconds else ""
        print(f"  wall time            {_duration(est.total_hours)}{extra}")
    if est.cost_usd is not None:
        gpus = f"{plan.world_size} GPU{'s' if plan.world_size != 1 else ''}"
        print(f"  cost                 ${est.cost_usd:,.2f} ({gpus} × "
              f"${est.gpu_hourly_usd:g}/GPU-hour; {plan.gpu.price_source})")
    if est.memory_gib_per_gpu is not None:
        cap = f" of {est.capacity_gib:g}" if est.capacity_gib else " (resident set per process)"
        spread = (f" (range {est.memory_range_gib[0]:.3g}-{est.memory_range_gib[1]:.3g})"
                  if est.memory_range_gib else "")
        print(f"  memory per GPU       {est.memory_gib_per_gpu:.3g}{spread}{cap} GiB: persistent + the larger of "
              "train/rollout")
        for term in est.memory_terms:
            knob = f"  cut: {term.knob}" if term.knob else ""
            print(f"    {term.name:<22} {term.gib:8.2f} GiB  {term.phase:<10} {term.basis:<8}{knob}")
    resized = est.fit is not None and plan.recipe.train.batch_size != est.fit.batch_size
    if est.fit is not None and est.fit.overrides and (not est.fits or resized):
        print(f"  fits with            {' '.join('--set ' + o for o in est.fit.overrides)} ({est.fit.note}; "
              "--fit applies it)")
    if est.guide is not None:
        g = est.guide
        parts = [f"{label} {mine} vs {theirs} ({r:g}×)" for label, mine, theirs, r in (
            ("step", _num(est.step_seconds, "s"), _num(g.guide_step_seconds, "s"), g.step_ratio if g.guide_step_seconds
             else None),
            ("total", _num(est.total_hours, "h"), _num(g.guide_total_hours, "h"),
             g.step_ratio if not g.guide_step_seconds else None),
            ("memory", _num(est.memory_gib_per_gpu, "GiB"), _num(g.guide_memory_gib, "GiB"), g.memory_ratio),
        ) if r is not None]
        print(f"  guide                {g.source}: {'; '.join(parts) or 'no comparable figure'}")
        if g.differs:
            print(f"  differs from guide   {g.differs}")
    cal = est.calibration
    if cal is not None:
        print(f"  measured ({cal.match})     job {cal.job}: {cal.measured_step_seconds:.3g} s/step measured vs "
              f"{cal.predicted_step_seconds:.3g} s predicted; "
              + ("using the measurement" if cal.match == "exact" else
                 f"step time × {cal.factor:.3g} (that run: model {cal.model_step_seconds:.3g} s)")
              + (f"; peak {cal.measured_peak_gib:.3g} GiB measured vs {cal.predicted_memory_gib:.3g} predicted"
                 if cal.measured_peak_gib is not None and cal.predicted_memory_gib is not None else ""))
    for line in est.assumptions:
        print(f"  assumes              {line}")


def _num(value: float | None, unit: str) -> str:
    return "-" if value is None else f"{value:.3g} {unit}"


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


def parse_duration_hours(text: str) -> float:
    """``48h``, ``2d``, ``90m``, ``3600s`` or a plain number of hours."""
    units = {"s": 1 / 3600, "m": 1 / 60, "h": 1.0, "d": 24.0}
    raw = text.strip().lower()
    unit = units.get(raw[-1:])
    number = raw[:-1] if unit is not None else raw
    try:
        value = float(number) * (unit or 1.0)
    except ValueError:
        raise PlanError(f"--deadline {text!r}: give a duration such as 48h, 2d or 90m") from None
    if value <= 0:
        raise PlanError(f"--deadline {text!r} must be positive")
    return value


def work_per_step(plan: JobPlan) -> tuple[list[str], str]:
    """What one step trains, as --set lines that pin it on another GPU, and in words."""
    algo = plan.recipe.algorithm
    if plan.estimate.workload == "rl" and isinstance(algo, GRPOAlgorithm):
        from gputrain.planner.workload_rl import step_prompts

        prompts, mini = step_prompts(algo, plan.recipe.train.batch_size, plan.world_size)
        return ([f"algorithm.train_batch_size={prompts}", f"algorithm.ppo_mini_batch_size={mini}"],
                f"{prompts}×{algo.num_generations}")
    return [], f"{plan.global_batch_size}"


def _same_work(plan: JobPlan, reference: JobPlan) -> list[str]:
    """--set lines that make ``plan`` train ``reference``'s step (RL prompts; else its global batch, kept by
    gradient accumulation around the row's own micro-batch)."""
    sets, _ = work_per_step(reference)
    if sets:
        return sets
    per_rank, left = divmod(reference.global_batch_size, plan.world_size)
    if left:
        raise PlanError(f"global batch {reference.global_batch_size} does not split over {plan.world_size} GPUs")
    micro = max(d for d in range(1, min(per_rank, plan.recipe.train.batch_size) + 1) if per_rank % d == 0)
    return [f"train.batch_size={micro}", f"train.grad_accum={per_rank // micro}"]


def _row(plan: JobPlan, where: str, note: str = "") -> dict[str, Any]:
    est = plan.estimate
    cost = est.cost_usd if plan.cluster is None else 0.0
    return {
        "gpu": plan.gpu.name, "where": where, "gpus": plan.world_size, "profile": plan.profile,
        "work_per_step": work_per_step(plan)[1], "grad_accum": plan.recipe.train.grad_accum,
        "precision": plan.precision, "attention": plan.attention, "batch_per_gpu": plan.recipe.train.batch_size,
        "memory_gib_per_gpu": _rounded(est.memory_gib_per_gpu, 2), "capacity_gib": est.capacity_gib,
        "fits": est.fits, "step_seconds": _rounded(est.step_seconds, 4), "total_hours": _rounded(est.total_hours, 3),
        "cost_usd": _rounded(cost, 2), "calibrated": est.calibration.job if est.calibration else None,
        "note": note,
    }


def reference_gpu(path: Path, gpu: str | None) -> str:
    """Whose step every row of ``--compare`` trains: ``--gpu``'s, else the recipe's first GPU profile's."""
    from gputrain.hardware.catalog import catalog, get_gpu
    from gputrain.recipe.loader import load_source

    if gpu:
        return get_gpu(gpu).name
    profiles = load_source(path).data.get("profiles") or {}
    known = catalog()
    first = next((n for n in profiles if n in known and not known[n].is_cpu), None)
    return first or next(g.name for g in known.values() if not g.is_cpu)


def compare_rows(path: Path, gpu: str | None, kwargs: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per catalog GPU type (the recipe's GPU count) and per configured cluster (its GPUs cost $0),
    every row training the same work per step: the reference row's (:func:`reference_gpu`)."""
    from gputrain.hardware.catalog import catalog
    from gputrain.hardware.clusters import list_clusters

    names = [g.name for g in catalog().values() if not g.is_cpu]
    first = reference_gpu(path, gpu)
    names.remove(first)
    names.insert(0, first)
    reference = make_plan(path, gpu=first, check_memory=False, **{**kwargs, "cluster": None})

    def like_reference(**where: Any) -> JobPlan:
        own = make_plan(path, check_memory=False, **where)
        sets = [*kwargs.get("overrides", []), *_same_work(own, reference)]
        return make_plan(path, check_memory=False, calibrate=True, **{**where, "overrides": sets})

    rows: list[dict[str, Any]] = []
    for name in names:
        try:
            plan = like_reference(gpu=name, **{**kwargs, "cluster": None})
        except PlanError as exc:
            rows.append({"gpu": name, "where": "cloud", "error": exc.message})
            continue
        rows.append(_row(plan, "cloud"))
    for cluster in list_clusters():
        if not cluster.gpu:
            continue
        try:
            plan = like_reference(cluster=cluster.name,
                                  **{k: v for k, v in kwargs.items() if k not in ("cluster", "target")})
        except PlanError as exc:
            rows.append({"gpu": cluster.gpu, "where": f"cluster:{cluster.name}", "error": exc.message})
            continue
        limit = cluster.max_time or "none"
        rows.append(_row(plan, f"cluster:{cluster.name}",
                         f"$0; per-user limit {cluster.gpus_per_node} GPUs per node, time limit {limit} per job "
                         "(longer runs requeue from checkpoints)"))
    return rows


def choose(rows: list[dict[str, Any]], deadline_h: float | None, budget: float | None) -> dict[str, Any] | None:
    """The cheapest row that fits and meets both the deadline and the budget (ties: the faster)."""
    ok = [r for r in rows if "error" not in r and r["fits"] and r["total_hours"] is not None
          and (deadline_h is None or r["total_hours"] <= deadline_h)
          and (budget is None or (r["cost_usd"] or 0.0) <= budget)]
    return min(ok, key=lambda r: (r["cost_usd"] or 0.0, r["total_hours"])) if ok else None


def print_compare(path: Path, gpu: str | None, kwargs: dict[str, Any], *, as_json: bool,
                  deadline: str | None = None, budget: float | None = None) -> None:
    deadline_h = parse_duration_hours(deadline) if deadline else None
    rows = compare_rows(path, gpu, kwargs)
    pick = choose(rows, deadline_h, budget) if (deadline_h is not None or budget is not None) else None
    if as_json:
        print(json.dumps({"rows": rows, "choice": pick}, indent=2))
        return
    from gputrain.cli.output import print_table

    def fmt(v: Any, spec: str) -> str:
        return "-" if v is None else format(v, spec)

    table = []
    for r in rows:
        if "error" in r:
            table.append([r["gpu"], r["where"], f"error: {r['error']}", *[""] * 9])
            continue
        table.append([r["gpu"], r["where"], r["gpus"], r["precision"], r["work_per_step"],
                      f"{r['batch_per_gpu']}×{r['grad_accum']}",
                      f"{fmt(r['memory_gib_per_gpu'], '.1f')}/{r['capacity_gib']:g}", "yes" if r["fits"] else "NO",
                      fmt(r["step_seconds"], ".3g"), fmt(r["total_hours"], ".3g"), fmt(r["cost_usd"], ",.2f"),
                      "measured" if r["calibrated"] else "model"])
    print_table(["GPU", "where", "GPUs", "prec", "work/step", "micro×accum", "GiB/GPU", "fits", "step s", "hours",
                 "cost $", "from"], table)
    ok = next((r for r in rows if "error" not in r), None)
    if ok is not None:
        print(f"every row trains the same step: {ok['work_per_step']} "
              f"({'prompts × completions' if '×' in ok['work_per_step'] else 'samples'}), the "
              f"{reference_gpu(path, gpu)} plan's; only the micro-batch and accumulation differ")
    for r in rows:
        if r.get("note"):
            print(f"{r['where']}: {r['note']}")
    if deadline_h is not None or budget is not None:
        asked = " and ".join(x for x in (f"≤ {deadline_h:g} h" if deadline_h is not None else "",
                                         f"≤ ${budget:,.2f}" if budget is not None else "") if x)
        if pick is None:
            print(f"nothing that fits meets {asked}")
        else:
            print(f"cheapest meeting {asked}: {pick['gpu']} ({pick['where']}, {pick['gpus']} GPUs): "
                  f"{pick['total_hours']:.3g} h, ${pick['cost_usd']:,.2f}")
