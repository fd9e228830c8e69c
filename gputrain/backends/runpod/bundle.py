"""The Docker build folder for a recipe: Dockerfile, build_and_push.sh, run.sh, run_multigpu.sh, plan.json
and a copy of the gputrain package (the image runs ``python -m gputrain.train.<module>``).

``gputrain docker recipes/gnn_coloring.yaml --gpu B200 --out build/`` writes it. Every file is written to a
temporary name, fsynced and renamed, so an interrupted run never leaves a half-written script behind.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from gputrain.atomic import write_atomic
from gputrain.errors import RenderError

if TYPE_CHECKING:
    from gputrain.contract.plan import JobPlan

EXECUTABLE = ("build_and_push.sh", "run.sh", "run_multigpu.sh")
_CUDA_LABEL = re.compile(r'gputrain\.cuda="(\d+\.\d+)"')


def render_bundle(plan: JobPlan) -> dict[str, str]:
    """``{file name: text}`` for the docker target, plus the plan the pod trains from."""
    from gputrain.render import render_artifacts

    files = render_artifacts(plan, target="docker")
    files["plan.json"] = plan.to_json()
    return files


def image_cuda(dockerfile: str) -> str | None:
    """The CUDA version the rendered Dockerfile's base image needs (its ``gputrain.cuda`` label)."""
    match = _CUDA_LABEL.search(dockerfile)
    return match.group(1) if match else None





def write_bundle(plan: JobPlan, out: Path) -> list[Path]:
    """Render everything first (so a template error writes nothing), then write each file atomically."""
    files = render_bundle(plan)
    written = []
    for name, text in files.items():
        target = out / name
        write_atomic(target, text, 0o755 if name in EXECUTABLE else 0o644)
        written.append(target)
    written.append(_copy_package(out))
    return written


def _copy_package(out: Path) -> Path:
    """The build context needs the package source; swap the copy in with one rename."""
    import gputrain

    source = Path(gputrain.__file__).resolve().parent
    if not (source / "train").is_dir():
        raise RenderError(f"{source} has no train/ package to put into the image")
    final = out / "gputrain"
    staging = Path(tempfile.mkdtemp(prefix=".gputrain.", dir=out))
    try:
        shutil.copytree(
            source, staging / "gputrain",
            ignore=shutil.ignore_patterns("__pycache__", "*.pyc", ".mypy_cache"),
        )
        if final.exists():
            old = out / f".gputrain.old.{os.getpid()}"
            os.replace(final, old)
            os.replace(staging / "gputrain", final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(staging / "gputrain", final)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return final
