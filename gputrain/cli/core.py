"""Core commands: ``recipes``, ``gpus``, ``plan``, ``validate``, ``schema``."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from gputrain.errors import HardwareError, RecipeError

RecipeArg = Annotated[str, typer.Argument(help="recipe file, or the name of a bundled recipe")]
SetOpt = Annotated[list[str] | None, typer.Option("--set", help="override a field: a.b=value (repeatable)")]
GpuOpt = Annotated[str | None, typer.Option("--gpu", help="GPU type (catalog name or alias); default: detect")]
GpusOpt = Annotated[int | None, typer.Option("--gpus", help="GPUs per node", min=1)]
NodesOpt = Annotated[int | None, typer.Option("--nodes", help="number of nodes", min=1)]
ClusterOpt = Annotated[str | None, typer.Option("--cluster", help="cluster profile (GPU type, partition, …)")]
PresetOpt = Annotated[str | None, typer.Option("--preset", help="named preset of the GPU profile")]


def resolve_recipe_path(arg: str) -> Path:
    """A path, or the name of a bundled recipe (``gnn_coloring``)."""
    path = Path(arg)
    if path.is_file():
        return path
    from gputrain.resources import recipes_dir

    bundled = recipes_dir() / (arg if arg.endswith(".yaml") else f"{arg}.yaml")
    if bundled.is_file():
        return bundled
    raise RecipeError(f"{arg}: recipe file not found (and no bundled recipe has that name; see `gputrain recipes`)")


def register(app: typer.Typer) -> None:
    app.command("recipes")(recipes)
    app.command("gpus")(gpus)
    app.command("plan")(plan)
    app.command("validate")(validate)
    app.command("schema")(schema)


def recipes(
    copy: Annotated[str | None, typer.Option("--copy", help="copy this bundled recipe here to edit it")] = None,
) -> None:
    """List the bundled recipes (or copy one to edit)."""
    import yaml

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
    rows = []
    for path in sorted(recipes_dir().glob("*.yaml")):
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=loader) or {}
        profiles = ",".join(data.get("profiles", {}))
        rows.append((path.stem, data.get("entrypoint", "?"), profiles, data.get("description", "")))
    width = max(len(r[0]) for r in rows)
    for name, entry, profiles, description in rows:
        print(f"{name:<{width}}  {entry:<12}  {description}  [profiles: {profiles}]")


def gpus(
    cluster: ClusterOpt = None,
    catalog_: Annotated[bool, typer.Option("--catalog", help="list every GPU type gputrain knows")] = False,
    json_: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """GPUs on this machine (or a cluster's, from sinfo), by canonical name."""
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
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    if not rows:
        return
    keys = list(rows[0])
    widths = {k: max(len(k), *(len(_cell(r[k])) for r in rows)) for k in keys}
    print("  ".join(k.upper().ljust(widths[k]) for k in keys))
    for r in rows:
        print("  ".join(_cell(r[k]).ljust(widths[k]) for k in keys))


def _cell(value: Any) -> str:
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    return "-" if value is None else str(value)


def plan(
    recipe: RecipeArg,
    gpu: GpuOpt = None,
    gpus: GpusOpt = None,
    nodes: NodesOpt = None,
    cluster: ClusterOpt = None,
    set_: SetOpt = None,
    preset: PresetOpt = None,
    target: Annotated[str | None, typer.Option("--target", help="local | slurm | docker")] = None,
    out: Annotated[Path | None, typer.Option("--out", help="write the scripts and plan.json here")] = None,
    compare: Annotated[bool, typer.Option("--compare", help="compare across GPU types")] = False,
    json_: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
) -> None:
    """Resolve a recipe for a GPU type and print settings, estimates and the rendered scripts."""
    from gputrain.cli.plan_output import print_compare, print_plan, write_outputs
    from gputrain.planner import make_plan
    from gputrain.render import render_artifacts

    path = resolve_recipe_path(recipe)
    kwargs: dict[str, Any] = dict(gpus_per_node=gpus, nodes=nodes, cluster=cluster, overrides=set_ or [],
                                  preset=preset, target=target)
    if compare:
        print_compare(path, gpu, kwargs, as_json=json_)
        return
    result = make_plan(path, gpu=gpu, **kwargs)
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
    else:
        print_plan(result, show_scripts=out is None)


def validate(
    recipes_: Annotated[list[Path], typer.Argument(metavar="RECIPE...", help="recipe files to check")],
    set_: SetOpt = None,
) -> None:
    """Check recipes (schema, types, unknown keys, every GPU profile) without planning a run."""
    from gputrain.planner.validate import validate_recipe_file

    for path in recipes_:
        summary = validate_recipe_file(resolve_recipe_path(str(path)), set_ or [])
        print(f"{path}: ok ({summary})")


def schema(
    plan_: Annotated[bool, typer.Option("--plan", help="the plan.json schema (JobPlan) instead")] = False,
) -> None:
    """Print the recipe JSON Schema (for editors: `gputrain schema > recipe.schema.json`), or with --plan the
    schema of plan.json."""
    if plan_:
        from gputrain.contract.plan import plan_json_schema

        sys.stdout.write(json.dumps(plan_json_schema(), indent=2) + "\n")
        return
    from gputrain.recipe.schema import Recipe

    document = Recipe.model_json_schema()
    document["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    document["title"] = "gputrain recipe"
    sys.stdout.write(json.dumps(document, indent=2) + "\n")
