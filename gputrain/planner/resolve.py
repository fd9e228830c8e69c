"""Recipe × hardware → a resolved :class:`~gputrain.contract.plan.JobPlan`.

Merge order is recipe ← GPU profile ← preset ← ``--set``; every leaf remembers which layer gave it, so
``gputrain plan`` can show where a batch size came from. Effective values (precision, attention, scaled
learning rate, actual GPU counts) are written into the resolved recipe (new model copies: validated
models are never mutated): the training entrypoints read only the plan and never re-derive them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from gputrain.contract.cluster import ClusterProfile
from gputrain.contract.estimate import Estimate, GuideComparison
from gputrain.contract.hardware import GPUFacts
from gputrain.contract.plan import Attention, JobPlan, Precision, Target
from gputrain.errors import PlanError, RecipeError, suggestion, unknown_name
from gputrain.hardware.catalog import catalog, get_gpu
from gputrain.planner.borrow import resize_borrowed
from gputrain.planner.estimate import estimate
from gputrain.planner.kernels import plan_kernels
from gputrain.planner.workload import global_batch as global_batch_of
from gputrain.planner.workload_rl import with_step_prompts
from gputrain.recipe.entrypoints import ENTRYPOINTS
from gputrain.recipe.loader import (
    Key,
    Location,
    Override,
    RecipeSource,
    apply_parsed,
    deep_merge,
    load_source,
    parse_overrides,
    validate_source,
)
from gputrain.recipe.schema import Profile, Recipe

TARGETS: tuple[Target, ...] = ("local", "slurm", "docker")
_PRECISIONS: dict[str, Precision] = {"bf16": "bf16", "fp16": "fp16", "fp32": "fp32"}
_ATTENTIONS: dict[str, Attention] = {"sdpa": "sdpa", "flash": "flash", "flex": "flex", "eager": "eager",
                                     "auto": "auto"}


def make_plan(
    recipe_path: str | Path,
    *,
    gpu: str | None = None,
    gpus_per_node: int | None = None,
    nodes: int | None = None,
    cluster: str | None = None,
    overrides: Iterable[str] = (),
    preset: str | None = None,
    target: str | None = None,
    check_memory: bool = True,
    calibrate: bool = False,
    prefer_job: str | None = None,
) -> JobPlan:
    """Resolve a recipe for a hardware choice. ``gpu=None`` detects the local GPU (or ``cpu``)."""
    overrides = list(overrides)
    source = load_source(recipe_path)
    parsed = parse_overrides(source, overrides)  # parsed once, applied once: over the merged layers below
    base = validate_source(apply_parsed(source, parsed))  # for the profile and preset choice only
    cluster_profile = _load_cluster(cluster) if cluster else None
    wanted_target = target or ("slurm" if cluster_profile else "local")
    chosen_target = next((t for t in TARGETS if t == wanted_target), None)
    if chosen_target is None:
        raise PlanError(unknown_name("target", wanted_target, TARGETS))
    warnings: list[str] = []
    gpu_type = _choose_gpu(gpu, cluster_profile, warnings)

    profile_name, profile = _match_profile(base, gpu_type, source, warnings)
    preset_name = _choose_preset(profile, preset, base, profile_name)
    merged, provenance, marks = _merge_layers(source, profile_name, profile, preset_name, parsed)
    recipe = validate_source(RecipeSource(source.path, merged, marks))

    gpus = gpus_per_node or (cluster_profile.gpus_per_node if cluster_profile else None)
    gpus = gpus or recipe.resources.gpus
    node_count = nodes or recipe.resources.nodes
    if gpus <= 0 or node_count <= 0:
        raise PlanError(f"GPUs per node and nodes must be positive (got {gpus} GPUs × {node_count} nodes)")
    if cluster_profile and cluster_profile.gpus_per_node and gpus > cluster_profile.gpus_per_node:
        raise PlanError(
            f"cluster {cluster_profile.name!r} has {cluster_profile.gpus_per_node} GPUs per node; "
            f"asked for {gpus} (use --nodes to scale out)"
        )
    for key, layer in (("gpus", gpus_per_node), ("nodes", nodes)):
        if layer is not None:
            provenance[f"resources.{key}"] = "flag"
        elif cluster_profile and key == "gpus":
            provenance["resources.gpus"] = f"cluster:{cluster_profile.name}"

    if profile_name is not None and profile_name != gpu_type.name:
        owner = catalog()[profile_name]
        recipe, note = resize_borrowed(recipe, owner, gpu_type, gpus * node_count, provenance)
        warnings.append(f"no profile for {gpu_type.name}; using the nearest by memory, {profile_name} "
                        f"({owner.memory_gib:g} GiB vs {gpu_type.memory_gib:g} GiB): {note}; precision and "
                        f"attention resolved for {gpu_type.name}, not borrowed")
    precision = _resolve_precision(recipe, gpu_type)
    attention = _resolve_attention(recipe, gpu_type, warnings)
    global_batch = global_batch_of(recipe, gpus * node_count)
    lr, lr_note = _resolve_lr(recipe, global_batch)
    recipe = recipe.model_copy(update={
        "resources": recipe.resources.model_copy(update={"gpus": gpus, "nodes": node_count}),
        "train": recipe.train.model_copy(update={"precision": precision, "attention": attention,
                                                 "learning_rate": lr}),
        "profiles": {},  # applied above; a plan holds the result only
    })

    est = estimate(recipe, gpu_type, gpus, node_count, precision, global_batch)
    est = _compare_with_guide(est, recipe, gpu_type, gpus * node_count, preset_name)
    if calibrate:
        from gputrain.planner.calibrate import calibrate as apply_calibration
        from gputrain.registry.measured import measured_runs

        est = apply_calibration(est, recipe, gpu_type, gpus * node_count, precision, measured_runs(),
                                prefer_job=prefer_job)
    warnings.extend(est.warnings)
    if check_memory and not est.fits:
        raise PlanError(est.fit_message)
    if est.total_hours is not None and est.total_hours > _hours(recipe.resources.time):
        warnings.append(
            f"estimated {est.total_hours:.1f} h exceeds the time limit {recipe.resources.time}: "
            "the job will rely on checkpoint + requeue"
        )
    limit = cluster_profile.gpu_limit if cluster_profile and not gpu_type.is_cpu else None
    if cluster_profile is not None and limit is not None and gpus * node_count > limit:
        warnings.append(
            f"the job asks for {gpus * node_count} GPUs but cluster {cluster_profile.name!r} lets a user hold "
            f"{limit} at once (gpu_limit; SuperCloud raises it after its course): it would stay pending on the "
            f"QOS limit; use --nodes 1 --gpus {min(gpus, limit)}"
        )
    recipe = with_step_prompts(recipe, gpus * node_count)  # the plan is their home; the trainer reads them
    return JobPlan(
        recipe=recipe, recipe_path=str(recipe_path), module=ENTRYPOINTS[recipe.entrypoint].module,
        gpu=gpu_type, gpus_per_node=gpus, nodes=node_count, world_size=gpus * node_count,
        precision=precision, attention=attention, kernels=plan_kernels(recipe, gpu_type),
        global_batch_size=global_batch, lr_note=lr_note, profile=profile_name, preset=preset_name, estimate=est,
        target=chosen_target,
        cluster=cluster_profile, warnings=warnings, provenance=provenance,
    )


def _compare_with_guide(est: Estimate, recipe: Recipe, gpu: GPUFacts, world: int, preset: str | None) -> Estimate:
    """The recipe's guide figure for this hardware (and preset) next to the plan, with the ratio."""
    guide = next((g for g in recipe.estimate.guides
                  if g.gpu == gpu.name and g.gpus == world and g.preset in (None, preset)), None)
    if guide is None:
        return est

    def ratio(mine: float | None, theirs: float | None) -> float | None:
        return round(mine / theirs, 3) if mine is not None and theirs else None

    comparison = GuideComparison(
        source=guide.source, guide_step_seconds=guide.step_seconds, guide_total_hours=guide.total_hours,
        guide_memory_gib=guide.memory_gib, step_ratio=ratio(est.step_seconds, guide.step_seconds)
        or ratio(est.total_hours, guide.total_hours), memory_ratio=ratio(est.memory_gib_per_gpu, guide.memory_gib),
        differs=guide.differs)
    warnings = list(est.warnings)
    off = [r for r in (comparison.step_ratio, comparison.memory_ratio) if r is not None and not 0.5 <= r <= 2]
    if off and not guide.differs:
        warnings.append(f"this plan is {', '.join(f'{r:g}×' for r in off)} the guide's figure ({guide.source}) "
                        "and the recipe gives no reason; treat the estimate with care")
    return est.model_copy(update={"guide": comparison, "warnings": warnings})


def _load_cluster(name: str) -> ClusterProfile:
    from gputrain.hardware.clusters import load_cluster

    return load_cluster(name)


def _choose_gpu(gpu: str | None, cluster_profile: ClusterProfile | None, warnings: list[str]) -> GPUFacts:
    if gpu:
        return get_gpu(gpu)
    if cluster_profile is not None and cluster_profile.gpu:
        return get_gpu(cluster_profile.gpu)
    from gputrain.hardware.detect import detect_local

    found = detect_local()
    if not found:
        warnings.append("no GPU detected on this machine: planning for cpu (use --gpu to plan for another)")
        return get_gpu("cpu")
    return found[0].catalog_type()


def _match_profile(
    recipe: Recipe, gpu: GPUFacts, source: RecipeSource, warnings: list[str]
) -> tuple[str | None, Profile | None]:
    known = catalog()
    for name in recipe.profiles:
        if name not in known:
            where = source.where(("profiles", name))
            raise RecipeError(f"{where}: profile {name!r} is not a catalog GPU; " + suggestion(name, known))
    if gpu.name in recipe.profiles:
        return gpu.name, recipe.profiles[gpu.name]
    candidates = [n for n in recipe.profiles if (n == "cpu") == gpu.is_cpu]
    if not candidates:
        warnings.append(f"recipe {recipe.name!r} has no profile for {gpu.name}: using the recipe's base values")
        return None, None
    nearest = min(candidates, key=lambda n: (abs(known[n].memory_gib - gpu.memory_gib), n))
    lent, _ = borrow_profile(recipe.profiles[nearest], known[nearest], gpu)
    return nearest, lent


#: settings a borrowed profile never lends: they are facts of the GPU the profile was written for
_GPU_FACT_FIELDS = ("precision", "attention")


def _lend(layer: Mapping[str, Any]) -> dict[str, Any]:
    out = {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in layer.items()}
    train = out.get("train")
    if isinstance(train, dict):
        for name in _GPU_FACT_FIELDS:
            train.pop(name, None)
        if not train:
            out.pop("train")
    return out


def borrow_profile(profile: Profile, owner: GPUFacts, gpu: GPUFacts) -> tuple[Profile, str]:
    """A profile written for ``owner`` as lent to ``gpu``: precision and attention dropped (resolved for
    ``gpu`` itself); the micro-batch is resized after the merge (:func:`gputrain.planner.borrow.resize_borrowed`),
    keeping the global batch."""
    lent = profile.model_copy(update={
        "set": _lend(profile.set),
        "presets": {name: _lend(layer) for name, layer in profile.presets.items()},
    })
    return lent, f"precision and attention resolved for {gpu.name}, not borrowed"


def _choose_preset(profile: Profile | None, wanted: str | None, recipe: Recipe, name: str | None) -> str | None:
    if profile is None:
        if wanted:
            raise PlanError(f"--preset {wanted!r} given but no GPU profile applies")
        return None
    if wanted:
        if wanted not in profile.presets:
            raise PlanError(unknown_name("preset", wanted, profile.presets, hint=f"GPU profile {name}"))
        return wanted
    if profile.preset_by:
        value: Any = recipe.model_dump(mode="json")
        for part in profile.preset_by.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        if value is not None and str(value) in profile.presets:
            return str(value)
        if value is not None and not profile.default_preset:
            raise PlanError(
                f"profile {name}: no preset for {profile.preset_by}={value}; known: {', '.join(profile.presets)}"
            )
    return profile.default_preset


def _leaves(data: Mapping[str, Any], prefix: Key = ()) -> Iterable[Key]:
    for key, value in data.items():
        if isinstance(value, Mapping) and value:
            yield from _leaves(value, (*prefix, key))
        else:
            yield (*prefix, key)


def _merge_layers(
    source: RecipeSource, profile_name: str | None, profile: Profile | None, preset: str | None,
    overrides: list[Override],
) -> tuple[dict[str, Any], dict[str, str], dict[Key, Location]]:
    data = dict(source.data)
    marks = dict(source.marks)
    provenance = {".".join(k): "recipe" for k in _leaves({k: v for k, v in data.items() if k != "profiles"})}
    layers: list[tuple[str, Key, Mapping[str, Any]]] = []
    if profile is not None and profile_name is not None:
        layers.append((f"profile:{profile_name}", ("profiles", profile_name, "set"), profile.set))
        if preset is not None:
            layers.append((f"preset:{preset}", ("profiles", profile_name, "presets", preset), profile.presets[preset]))
    for label, origin, layer in layers:
        data = deep_merge(data, layer)
        for leaf in _leaves(layer):
            provenance[".".join(leaf)] = label
            for n in range(1, len(leaf) + 1):
                loc = source.marks.get((*origin, *leaf[:n]))
                if loc is not None:
                    marks[leaf[:n]] = loc
    merged = apply_parsed(RecipeSource(source.path, data, marks), overrides)
    for key, _, _ in overrides:
        provenance[".".join(key)] = "--set"
    return merged.data, provenance, merged.marks


def _resolve_precision(recipe: Recipe, gpu: GPUFacts) -> Precision:
    wanted = recipe.train.precision
    if gpu.is_cpu:
        return "fp32"
    if wanted == "auto":
        return "bf16" if gpu.bf16 else "fp16"
    if wanted == "bf16" and not gpu.bf16:
        raise PlanError(f"train.precision=bf16 but {gpu.name} has no bf16: use fp16 (with loss scaling) or auto")
    return _PRECISIONS[wanted]


def _resolve_attention(recipe: Recipe, gpu: GPUFacts, warnings: list[str]) -> Attention:
    """Decided from the GPU's facts only, never from the planning machine's packages: ``auto`` on a GPU
    that flash-attn supports (Ampere and later) stays ``auto`` and the job resolves it on its node
    (``gputrain.train.runtime``: flash-attn if installed there, else sdpa, logged)."""
    wanted = recipe.train.attention
    flash_capable = not gpu.is_cpu and gpu.bf16  # flash-attn 2 needs Ampere or later; bf16 marks them here
    if wanted == "auto":
        return "auto" if flash_capable else "sdpa"
    if wanted == "flash" and not flash_capable:
        reason = "it is CPU" if gpu.is_cpu else "it predates Ampere"
        warnings.append(f"train.attention=flash is not available on {gpu.name} ({reason}): using sdpa")
        return "sdpa"
    if wanted == "flex" and gpu.is_cpu:
        warnings.append("FlexAttention needs a GPU: using sdpa")
        return "sdpa"
    return _ATTENTIONS[wanted]


def _resolve_lr(recipe: Recipe, global_batch: int) -> tuple[float, str]:
    train = recipe.train
    base = train.learning_rate
    if train.lr_scaling == "none" or train.reference_batch is None:
        lr, note = base, f"learning rate {base:g} as given"
        if train.lr_scaling != "none":
            note += f" (lr_scaling={train.lr_scaling} needs train.reference_batch)"
    else:
        ratio = global_batch / train.reference_batch
        factor = ratio if train.lr_scaling == "linear" else math.sqrt(ratio)
        lr = base * factor
        note = (f"{train.lr_scaling} scaling: {base:g} × {factor:.3g} "
                f"(global batch {global_batch} vs {train.reference_batch})")
    if train.lr_table:
        table = ", ".join(f"{b}→{v:g}" for b, v in sorted(train.lr_table.items()))
        listed = train.lr_table.get(global_batch)
        note += f"; source table {table}"
        note += f" says {listed:g} at {global_batch}" if listed is not None else ""
        note += f"; using {lr:.3g} from the rule"
    return lr, note


def _hours(limit: str) -> float:
    days, _, rest = limit.rpartition("-")
    h, m, s = (int(x) for x in rest.split(":"))
    return (int(days) if days else 0) * 24 + h + m / 60 + s / 3600
