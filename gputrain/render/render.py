"""Plan → script text through Jinja templates, shell-safe by default.

Every ``{{ expression }}`` is passed through ``finalize``, which shell-quotes it unless the value is a
:class:`Trusted` fragment that a filter built on purpose. Template authors therefore cannot forget to
quote a recipe value: forgetting ``| shq`` still quotes, and the only way to emit raw text is ``| raw``
on values the template itself controls (integers, validated names). ``StrictUndefined`` turns a typo in a
template into an error instead of an empty string.
"""

from __future__ import annotations

import functools
import re
import shlex
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gputrain import __version__
from gputrain.contract.needs import hub_items
from gputrain.errors import RenderError
from gputrain.render.allocator_env import launch_env
from gputrain.resources import templates_dir

if TYPE_CHECKING:
    import jinja2

    from gputrain.contract.plan import JobPlan

_NAME_RE = re.compile(r"\A[A-Za-z_][A-Za-z0-9_]*\Z")
#: C0 control characters and DEL: a newline ends a comment or an ``#SBATCH`` line even inside quotes.
CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")

#: Which templates each target renders, and the file name each lands under.
TARGET_TEMPLATES: dict[str, dict[str, str]] = {
    "local": {"launch.sh": "launch.sh.j2"},
    "slurm": {"job.sbatch": "sbatch.j2"},
    "docker": {
        "Dockerfile": "Dockerfile.j2",
        "build_and_push.sh": "build_and_push.sh.j2",
        "run.sh": "run.sh.j2",
        "run_multigpu.sh": "run_multigpu.sh.j2",
    },
}


class Trusted(str):
    """Text a filter produced deliberately; ``finalize`` emits it as is."""


def no_controls(text: str) -> str:
    """``text`` unchanged, or a RenderError if it holds a control character (``\\n``, ``\\r``, ``\\0``, ...).

    Quoting cannot make a newline safe: in a comment or an ``#SBATCH`` line it starts a new shell line.
    """
    found = CONTROL_RE.search(text)
    if found:
        shown = text if len(text) <= 60 else text[:57] + "..."
        raise RenderError(f"refusing to render {shown!r}: it contains the control character {found.group()!r}")
    return text


def shq(value: Any) -> Trusted:
    """Shell-quote one value (lists become space-separated quoted words)."""
    if isinstance(value, list | tuple):
        return Trusted(" ".join(shlex.quote(no_controls(str(v))) for v in value))
    return Trusted(shlex.quote(no_controls(str(value))))


def comment(value: Any) -> Trusted:
    """Text for a ``#`` comment line: control characters shown as escapes (a file name may hold one)."""
    return Trusted(CONTROL_RE.sub(lambda m: repr(m.group())[1:-1], str(value)))


def raw(value: Any) -> Trusted:
    """Emit without quoting: only for numbers and names the template controls."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise RenderError(f"refusing to emit {type(value).__name__} unquoted")
    text = no_controls(str(value))
    if shlex.quote(text) != text:
        raise RenderError(f"refusing to emit {text!r} unquoted: it contains shell metacharacters")
    return Trusted(text)


def shell_line(value: Any) -> Trusted:
    """A whole shell command from the user's own cluster profile (``module load cuda``), emitted verbatim.

    Cluster set-up lines are commands by definition and come from the user's config, never from a recipe;
    they may not smuggle in extra lines.
    """
    text = str(value)
    if CONTROL_RE.search(text):
        raise RenderError(f"a set-up line must be a single line without control characters: {text!r}")
    return Trusted(text)


def env_ref(name: str) -> Trusted:
    """``${NAME}``: how a secret appears in a script (its value stays in the environment)."""
    if not _NAME_RE.match(name):
        raise RenderError(f"{name!r} is not an environment variable name")
    return Trusted("${" + name + "}")


def env_default(name: str) -> Trusted:
    """``${NAME:-}``: a reference that is empty rather than an error under ``set -u``."""
    return Trusted(env_ref(name)[:-1] + ":-}")


def _finalize(value: Any) -> Any:
    if isinstance(value, Trusted):
        return value
    if value is None:
        raise RenderError("a template tried to emit an empty (None) value")
    return shlex.quote(no_controls(str(value)))


def _bytecode_cache() -> jinja2.BytecodeCache | None:
    """Compiled templates cached per user: compiling sbatch.j2 costs more than the rest of a submit."""
    import os

    import jinja2

    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    folder = os.path.join(base, "gputrain", "jinja")
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError:
        return None
    return jinja2.FileSystemBytecodeCache(folder)


@functools.cache
def environment(directory: str | None = None) -> jinja2.Environment:
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(directory or str(templates_dir())),
        bytecode_cache=_bytecode_cache(),
        undefined=jinja2.StrictUndefined,
        finalize=_finalize,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )
    env.filters.update(shq=shq, raw=raw, env_ref=env_ref, env_default=env_default, shell_line=shell_line,
                       comment=comment)
    return env


#: Secrets a feature needs, and whether a plan turns that feature on: ``gputrain run`` (launch.sh) does not
#: warn about a secret its job does not use (a CPU toy run without W&B, or one that downloads nothing).
_SECRET_USERS: dict[str, Callable[[JobPlan], bool]] = {
    "WANDB_API_KEY": lambda plan: plan.recipe.tracking.wandb,
    "HF_TOKEN": lambda plan: bool(hub_items(plan)),
}


def _secret_used(name: str, plan: JobPlan) -> bool:
    used = _SECRET_USERS.get(name)
    return used is None or used(plan)


def template_context(plan: JobPlan, job_dir: str | Path | None = None) -> dict[str, Any]:
    """What every template sees. Secrets appear by name only."""
    recipe = plan.recipe
    for name in recipe.secrets:
        if not _NAME_RE.match(name):
            raise RenderError(f"secret name {name!r} is not an environment variable name")
    plan_path = f"{job_dir}/plan.json" if job_dir else "plan.json"
    return {
        "recipe": recipe.name,
        "recipe_path": plan.recipe_path,
        "module": plan.module,
        "gpu": plan.gpu.name,
        "gpus_per_node": plan.gpus_per_node,
        "nodes": plan.nodes,
        "world_size": plan.world_size,
        "env": launch_env(plan),  # GPU allocator defaults + the recipe's env
        "secrets": list(recipe.secrets),
        "used_secrets": [name for name in recipe.secrets if _secret_used(name, plan)],
        "job_dir": str(job_dir) if job_dir else None,
        "plan_path": plan_path,
        "version": __version__,
    }


def render_template(name: str, context: Mapping[str, Any]) -> str:
    import jinja2

    try:
        return environment().get_template(name).render(**context)
    except jinja2.TemplateNotFound:
        raise RenderError(f"template {name} is missing from {templates_dir()}") from None
    except jinja2.UndefinedError as exc:
        raise RenderError(f"template {name}: {exc.message}") from None

