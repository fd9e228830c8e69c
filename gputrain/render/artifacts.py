"""Every script a plan's target needs, by target: the one place that knows which renderer writes which file.

Kept apart from :mod:`gputrain.render.render` (templates, filters) and :mod:`gputrain.render.sbatch` (the
Slurm script, which renders through the former), so the three import in one direction only.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from gputrain.render.render import TARGET_TEMPLATES, render_template, template_context
from gputrain.render.sbatch import SbatchInputs, render_sbatch

if TYPE_CHECKING:
    from gputrain.contract.plan import JobPlan


def render_artifacts(
    plan: JobPlan, job_dir: str | Path | None = None, target: str | None = None, *, sbatch: SbatchInputs | None = None
) -> dict[str, str]:
    """Render every script the plan's target needs: ``{file name: text}``.

    The slurm target's script takes ``sbatch`` inputs; without them it is shown as a submission from here and
    now would write it (:meth:`~gputrain.render.sbatch.SbatchInputs.here`).
    """
    target = target or plan.target
    if target == "slurm":
        return {"job.sbatch": render_sbatch(plan, sbatch or SbatchInputs.here(plan))}
    context = template_context(plan, job_dir)
    return {out: render_template(tpl, context) for out, tpl in TARGET_TEMPLATES[target].items()}
