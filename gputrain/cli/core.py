"""Core commands: ``recipes``, ``gpus``, ``plan``, ``validate``, ``schema``.

    gputrain recipes ; gputrain gpus --catalog
    gputrain plan recipes/bd3lm_gsm8k.yaml --gpu H200 --gpus 1
    gputrain validate my_recipe.yaml ; gputrain schema > recipe.schema.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from gputrain.cli import complete
from gputrain.errors import GputrainError, HardwareError, RecipeError, UserError, did_you_mean, unknown_name

RecipeArg = Annotated[str, typer.Argument(help="recipe file, or the name of a bundled recipe",
                                                      autocompletion=complete.recipes)]
SetOpt = Annotated[list[str] | None, typer.Option("--set", help="override a field: a.b=value (repeatable)")]
GpuOpt = Annotated[str | None, typer.Option("--gpu", help="GPU type (catalog name or alias); default: detect",
                                                  autocompletion=complete.gpus)]
GpusOpt = Annotated[int | None, typer.Option("--gpus", help="GPUs per node", min=1)]
NodesOpt = Annotated[int | None, typer.Option("--nodes", help="number of nodes", min=1)]
ClusterOpt = Annotated[str | None, typer.Option("--cluster", help="cluster profile (GPU type, partition, …)",
                                                      autocompletion=complete.clusters)]
PresetOpt = Annotated[str | None, typer.Option("--preset", help="named preset of the GPU profile",
                                                    autocompletion=complete.presets)]
JsonOpt = Annotated[bool, typer.Option("--json", help="print JSON (errors too, as {\"error\": ...})")]


def resolve_recipe_path(arg: str) -> Path:
    """A path, or the name of a bundled recipe (``gnn_coloring``); a near miss gets a suggestion."""
    path = Path(arg)
    if path.is_file():
        return path
    from gputrain.resources import recipes_dir

    bundled = recipes_dir() / (arg if arg.endswith(".yaml") else f"{arg}.yaml")
    if bundled.is_file():
        return bundled
    names = [p.stem for p in sorted(recipes_dir().glob("*.yaml"))]
    if path.parent == Path(".") and not arg.endswith((".yaml", ".yml")):
        raise RecipeError(unknown_name("recipe", arg, names, hint="not a file either; see `gputrain recipes`"))
    neighbours = [p.name for p in sorted(path.parent.glob("*.y*ml"))] if path.parent.is_dir() else []
    near = [str(path.parent / n) for n in did_you_mean(path.name, neighbours)] or did_you_mean(path.stem, names)
    tail = f"did you mean {' or '.join(near)}?" if near else f"bundled recipes: {', '.join(names)}"
    raise RecipeError(f"{arg}: recipe file not found; {tail}")


def resume_source(ref: str) -> Path:
    """The job folder ``--resume-from REF`` names (a job id from `gputrain jobs`, or a folder); checked now,
    before anything is planned or written."""
    from gputrain.backends.resume import newest_checkpoint
    from gputrain.cli.logs import NotStarted, resolve_target

    try:
        folder, _ = resolve_target(ref)
    except (GputrainError, NotStarted) as exc:
        raise UserError(f"--resume-from {ref}: {exc}") from None
    if not folder.is_dir():
        raise UserError(f"--resume-from {ref}: not a job folder")
    if newest_checkpoint(folder) is None:
        raise UserError(f"--resume-from {ref}: {folder} has no complete checkpoint to resume from")
    return folder


def recipes(
    copy: Annotated[str | None, typer.Option("--copy", help="copy this bundled recipe here to edit it")] = None,
    json_: JsonOpt = False,
) -> None:
    """List the bundled recipes (or copy one to edit).

    \b
    Examples:
      gputrain recipes
      gputrain recipes --copy gnn_coloring     # writes ./gnn_coloring.yaml
    """
    import yaml

    from gputrain.cli.output import print_json, print_table
    from gputrain.resources import recipes_dir

    if copy:
        source = resolve_recipe_path(copy)
        target = Path.cwd() / source.name
        if target.exists():
            raise RecipeError(f"{target} already exists; not overwriting it")
        from gputrain.atomic import write_atomic

        write_atomic(target, source.read_bytes())
        print(f"copied {source.name} to {target}")
        return
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    rows: list[dict[str, Any]] = []
    for path in sorted(recipes_dir().glob("*.yaml")):
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=loader) or {}
        rows.append({"name": path.stem, "entrypoint": data.get("entrypoint", "?"),
                     "description": data.get("description", ""), "profiles": list(data.get("profiles", {}))})
    if json_:
        print_json(rows)
        return
    print_table(["name", "entrypoint", "description", "profiles"], [list(r.values()) for r in rows])


def gpus(
    cluster: ClusterOpt = None,
    catalog_: Annotated[bool, typer.Option("--catalog", help="list every GPU type gputrain knows")] = False,
    json_: JsonOpt = False,
) -> None:
    """GPUs on this machine (or a cluster's, from sinfo), by canonical name.

    \b
    Examples:
      gputrain gpus
      gputrain gpus --catalog                 # every GPU type: memory, TFLOP/s, $/GPU-hour
      gputrain gpus --cluster supercloud
    """
    from gputrain.hardware.catalog import catalog

    if catalog_:
        rows: list[dict[str, Any]] = [
            {"name": g.name, "memory_gib": g.memory_gib, "bf16": g.bf16, "fp8": g.fp8,
             "tflops_bf16": g.tflops_bf16, "tflops_fp16": g.tflops_fp16, "bandwidth_gbs": g.bandwidth_gbs,
             "interconnect": g.interconnect, "usd_per_hour": g.price_usd_hour, "aliases": list(g.aliases)}
            for g in catalog().values()
        ]
        _print_rows(rows, json_)
        return
    if cluster:
        _cluster_gpus(cluster, json_)
        return
    from gputrain.hardware.detect import detect_local

    found = detect_local()
    rows = []
    for gpu in found:
        try:
            canonical = gpu.catalog_type().name
        except HardwareError:  # a GPU the catalog does not know is listed, not fatal
            canonical = "unknown"
        rows.append({"index": gpu.index, "name": gpu.name, "canonical": canonical, "memory_mib": gpu.memory_mib})
    if not rows and not json_:
        print("none (no NVIDIA GPU found via NVML or nvidia-smi; plan with --gpu NAME)")
        return
    _print_rows(rows, json_)


def _cluster_gpus(name: str, json_: bool) -> None:
    from gputrain.hardware.clusters import load_cluster
    from gputrain.hardware.detect import detect_cluster

    load_cluster(name)
    rows = []
    for row in detect_cluster():
        kinds = [g.name for g in row.candidates()]
        rows.append({"partition": row.partition, "node": row.node, "gres": f"gpu:{row.gres_type or ''}:{row.count}",
                     "count": row.count, "canonical": "/".join(kinds) or "unknown"})
    if not rows and not json_:
        print(f"none (cluster {name}: sinfo shows no GPU GRES)")
        return
    _print_rows(rows, json_)


def _print_rows(rows: list[dict[str, Any]], as_json: bool) -> None:
    from gputrain.cli.output import print_json, print_table

    if as_json:
        print_json(rows)
    elif rows:
        print_table(list(rows[0]), [list(r.values()) for r in rows])


def plan(
    recipe: RecipeArg,
    gpu: GpuOpt = None,
    gpus: GpusOpt = None,
    nodes: NodesOpt = None,
    cluster: ClusterOpt = None,
    set_: SetOpt = None,
    preset: PresetOpt = None,
    target: Annotated[str | None, typer.Option("--target", help="local | slurm | docker (default: slurm with "
                                               "--cluster, else local)")] = None,
    out: Annotated[Path | None, typer.Option("--out", help="write the scripts and plan.json here")] = None,
    compare: Annotated[bool, typer.Option("--compare", help="compare across GPU types and clusters")] = False,
    deadline: Annotated[str | None, typer.Option("--deadline", help="with --compare: longest run, e.g. 48h")] = None,
    budget: Annotated[float | None, typer.Option("--budget", help="with --compare: most dollars to spend")] = None,
    fit: Annotated[bool, typer.Option("--fit", help="apply the largest per-GPU batch (and vLLM share) that "
                                      "fits")] = False,
    probe: Annotated[bool, typer.Option("--probe", help="run a few real steps here first and plan from them")] = False,
    steps: Annotated[int, typer.Option("--steps", help="steps --probe runs", min=2)] = 5,
    json_: JsonOpt = False,
) -> None:
    """Resolve a recipe for a GPU type and print settings, estimates and the rendered scripts.

    Settings show where each value came from (recipe, profile:<GPU>, preset:<name>, --set). Warnings go
    to stderr. --json prints one JSON object, or {"error": ...} when the recipe cannot be planned.

    \b
    Examples:
      gputrain plan recipes/bd3lm_gsm8k.yaml --gpu H200 --gpus 1 --set train.batch_size=192
      gputrain plan grpo_code_mbpp --cluster supercloud
      gputrain plan gdpo_deepscaler --gpu B200 --gpus 4 --compare
      gputrain plan gnn_coloring --gpu B200 --gpus 8 --target docker --out build/
      gputrain plan gdpo_deepscaler --compare --deadline 48h --budget 200
      gputrain plan grpo_math_fsdp --gpu H100 --gpus 2 --fit
      gputrain plan gnn_coloring --gpu cpu --gpus 2 --probe --steps 8
    """
    from gputrain.cli.plan_output import print_compare, print_plan, write_outputs
    from gputrain.planner import make_plan
    from gputrain.render import render_artifacts

    path = resolve_recipe_path(recipe)
    kwargs: dict[str, Any] = dict(gpus_per_node=gpus, nodes=nodes, cluster=cluster, overrides=set_ or [],
                                  preset=preset, target=target)
    if compare or deadline or budget is not None:
        print_compare(path, gpu, kwargs, as_json=json_, deadline=deadline, budget=budget)
        return
    probe_job = None
    if probe:
        from gputrain.cli.probe import run_probe

        probe_job = run_probe(path, gpu, kwargs, steps)
    if fit:
        first = make_plan(path, gpu=gpu, check_memory=False, **kwargs)
        if first.estimate.fit is not None and first.estimate.fit.overrides:
            kwargs["overrides"] = [*kwargs["overrides"], *first.estimate.fit.overrides]
            from gputrain.cli.output import warn

            warn(f"--fit: {' '.join(first.estimate.fit.overrides)} ({first.estimate.fit.note})")
    result = make_plan(path, gpu=gpu, calibrate=True, prefer_job=probe_job, **kwargs)
    artifacts = render_artifacts(result)
    if out is not None and result.target == "docker":
        from gputrain.backends.runpod.bundle import write_bundle  # the build context needs the package too

        written = {p.name: str(p) for p in write_bundle(result, out)}
    elif out is not None:
        written = write_outputs(result, artifacts, out)
    else:
        written = artifacts
    result = result.model_copy(update={"artifacts": written})
    if json_:
        sys.stdout.write(result.to_json())
        return
    from gputrain.cli.output import warn

    for warning in result.warnings:
        warn(warning)
    print_plan(result, show_scripts=out is None)


def validate(
    recipes_: Annotated[list[Path], typer.Argument(metavar="RECIPE...", help="recipe files to check")],
    set_: SetOpt = None,
    json_: JsonOpt = False,
) -> None:
    """Check recipes (schema, types, unknown keys, every GPU profile) without planning a run.

    Every problem of a recipe is listed, one line each (stderr; with --json one object per recipe on stdout:
    {"recipe", "ok", "summary" | "errors"}); exit 2 when any recipe has one.

    \b
    Examples:
      gputrain validate my_recipe.yaml
      gputrain validate recipes/*.yaml --set train.max_steps=10 --json
    """
    from gputrain.planner.validate import validate_recipe_file

    rows: list[dict[str, Any]] = []
    for path in recipes_:
        try:
            summary = validate_recipe_file(resolve_recipe_path(str(path)), set_ or [])
        except RecipeError as exc:
            rows.append({"recipe": str(path), "ok": False, "errors": list(exc.lines or (exc.message,))})
            continue
        rows.append({"recipe": str(path), "ok": True, "summary": summary})
    if json_:
        from gputrain.cli.output import print_json

        print_json(rows)
    else:
        for row in rows:
            if row["ok"]:
                print(f"{row['recipe']}: ok ({row['summary']})")
            for line in row.get("errors", []):
                print(f"error: {line}", file=sys.stderr)
    if not all(row["ok"] for row in rows):
        raise typer.Exit(2)


def schema(
    plan_: Annotated[bool, typer.Option("--plan", help="the schema of plan.json instead")] = False,
) -> None:
    """Print the recipe JSON Schema (for editors), or with --plan the schema of plan.json.

    \b
    Example:
      gputrain schema > recipe.schema.json
      gputrain schema --plan > plan.schema.json
    """
    if plan_:
        from gputrain.contract.plan import plan_json_schema

        sys.stdout.write(json.dumps(plan_json_schema(), indent=2) + "\n")
        return
    from gputrain.recipe.schema import Recipe

    document = Recipe.model_json_schema()
    document["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    document["title"] = "gputrain recipe"
    sys.stdout.write(json.dumps(document, indent=2) + "\n")
