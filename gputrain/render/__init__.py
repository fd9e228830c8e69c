"""Plan → script text (Jinja, StrictUndefined, everything shell-quoted unless a filter says otherwise)."""

from gputrain.render.artifacts import render_artifacts
from gputrain.render.render import (
    TARGET_TEMPLATES,
    Trusted,
    env_ref,
    raw,
    render_template,
    shq,
    template_context,
)
from gputrain.render.sbatch import SbatchInputs, render_sbatch

__all__ = [
    "TARGET_TEMPLATES",
    "SbatchInputs",
    "Trusted",
    "env_ref",
    "raw",
    "render_artifacts",
    "render_sbatch",
    "render_template",
    "shq",
    "template_context",
]
