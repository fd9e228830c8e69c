"""Plan → script text (Jinja, StrictUndefined, everything shell-quoted unless a filter says otherwise)."""

from gputrain.render.render import (
    TARGET_TEMPLATES,
    Trusted,
    env_ref,
    raw,
    render_artifacts,
    render_sbatch,
    render_template,
    shq,
    template_context,
)

__all__ = [
    "TARGET_TEMPLATES",
    "Trusted",
    "env_ref",
    "raw",
    "render_artifacts",
    "render_sbatch",
    "render_template",
    "shq",
    "template_context",
]
