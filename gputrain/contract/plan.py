"""The resolved plan of one job: what the planner decided, typed and versioned; ``plan.json`` is its text.

The planner builds a :class:`JobPlan` (``gputrain.planner.make_plan``); the renderers, the backends and the
summaries read it; the job folder keeps it as ``plan.json``; every training reads it back through
:func:`load_job_plan` and sees it as ``ctx.plan`` (``ctx.recipe`` is ``plan.recipe``). Nothing downstream
re-derives a value the planner resolved (precision, attention, learning rate, GPU counts): those are written
into ``recipe`` too, so ``plan.recipe.train.precision`` is the effective one.

Versioning: any change to the fields of this module or of the models it holds (the recipe schema
included) bumps :data:`SCHEMA_VERSION`. A ``plan.json`` of another version is refused with one line
naming both versions: re-plan it with this gputrain (``gputrain plan RECIPE --out DIR``).

Groups of fields: the recipe as resolved (``recipe``, ``recipe_path``, ``module``), the hardware decision
(``gpu`` … ``preset``), the ``estimate``, where it runs (``target``, ``cluster``) and how it was decided
(``provenance``, ``warnings``), plus ``artifacts`` (the scripts rendered from it, name → path or text).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from gputrain.contract.assets import OfflineAssets, RepoKind
from gputrain.contract.cluster import ClusterProfile
from gputrain.contract.estimate import Estimate
from gputrain.contract.hardware import GPUFacts
from gputrain.contract.kernels import KernelChoice
from gputrain.errors import PlanFileError
from gputrain.recipe.entrypoints import ENTRYPOINTS
from gputrain.recipe.schema import Recipe

SCHEMA_VERSION = 6
"""Version of the plan contract; plan.json files of earlier gputrain versions (no ``schema_version``,
a ``config`` object) count as version 0. Version 2: the planner's workload estimate; version 3 added
``offline`` (hub commits pinned by ``gputrain prepare``); version 4: the GRPO algorithm's prompt format,
length gate, entropy bonus and vLLM importance-sampling settings; version 5: the cluster profile's
preemption signal and per-cause requeue limit, and pinned hub items that are a model's tokenizer only."""

Target = Literal["local", "slurm", "docker"]
Precision = Literal["bf16", "fp16", "fp32"]
Attention = Literal["auto", "sdpa", "flash", "flex", "eager"]
"""``auto``: resolved where the job runs (flash-attn if the node has it and the GPU supports it, else sdpa)."""


class JobPlan(BaseModel):
    """A recipe resolved for one hardware choice. Frozen: derive a changed plan with ``model_copy(update=)``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: int = Field(default=SCHEMA_VERSION, description="version of this contract")

    # -- the recipe as resolved: base ← GPU profile ← preset ← --set, effective values written in --------
    recipe: Recipe = Field(description="the resolved recipe; algorithm typed per entrypoint; no profiles")
    recipe_path: str = Field(description="the recipe file the plan was made from")
    module: str = Field(description="the entrypoint's module, run as python -m MODULE --plan plan.json")

    # -- the hardware decision ----------------------------------------------------------------------------
    gpu: GPUFacts = Field(description="facts of the GPU type planned for (catalog snapshot)")
    gpus_per_node: int = Field(gt=0)
    nodes: int = Field(gt=0)
    world_size: int = Field(gt=0, description="gpus_per_node × nodes: training processes")
    precision: Precision
    attention: Attention
    kernels: KernelChoice | None = Field(default=None, description="attention kernel, compile and precision the "
                                         "resolver chose for this GPU, with the reason (gputrain.contract.kernels)")
    global_batch_size: int = Field(gt=0, description="batch_size × world_size × grad_accum")
    lr_note: str = Field(default="", description="how the learning rate was reached")
    profile: str | None = Field(default=None, description="the recipe's GPU profile applied")
    preset: str | None = Field(default=None, description="the profile's preset applied")

    # -- prediction, place, and how it was decided --------------------------------------------------------
    estimate: Estimate
    target: Target = "local"
    cluster: ClusterProfile | None = Field(default=None, description="the Slurm site (target slurm)")
    offline: OfflineAssets | None = Field(default=None, description="hub commits pinned by gputrain prepare "
                                          "and the cache holding them (clusters without internet)")
    provenance: dict[str, str] = Field(default_factory=dict, description="dotted field → layer that set it")
    warnings: list[str] = Field(default_factory=list)
    artifacts: dict[str, str] = Field(default_factory=dict, description="rendered scripts: name → path")

    @model_validator(mode="after")
    def _consistent(self) -> JobPlan:
        if self.world_size != self.gpus_per_node * self.nodes:
            raise ValueError(f"world_size {self.world_size} is not gpus_per_node {self.gpus_per_node} × "
                             f"nodes {self.nodes}")
        expected = ENTRYPOINTS[self.recipe.entrypoint].module
        if self.module != expected:
            raise ValueError(f"module {self.module!r} is not entrypoint {self.recipe.entrypoint}'s ({expected})")
        return self

    @property
    def learning_rate(self) -> float:
        """After lr_scaling: one home, the resolved recipe the trainers read (``train.learning_rate``)."""
        return self.recipe.train.learning_rate

    def to_json(self) -> str:
        """The text of ``plan.json`` (keys sorted, so two plans diff cleanly)."""
        return json.dumps(self.model_dump(mode="json"), indent=2, sort_keys=True) + "\n"

    def pinned_commit(self, kind: RepoKind, repo: str) -> str | None:
        """The hub commit ``gputrain prepare`` pinned for ``repo`` (None: not pinned; load its default)."""
        return self.offline.commit_of(kind, repo) if self.offline is not None else None

    def resolved_recipe_data(self) -> dict[str, Any]:
        """The resolved recipe as plain data (``recipe.resolved.yaml``): no ``profiles``, already applied."""
        return self.recipe.model_dump(mode="json", exclude={"profiles"})


def plan_json_schema() -> dict[str, Any]:
    """JSON Schema of ``plan.json`` (``gputrain schema --plan``)."""
    document = JobPlan.model_json_schema()
    document["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    document["title"] = f"gputrain plan (schema version {SCHEMA_VERSION})"
    return document


def parse_job_plan(data: Any, where: str) -> JobPlan:
    """A :class:`JobPlan` from decoded JSON; anything else is a one-line :class:`PlanFileError` at ``where``."""
    if not isinstance(data, dict):
        raise PlanFileError(f"{where}: not a gputrain plan (a JSON {type(data).__name__}, not an object)")
    version = data.get("schema_version")
    if version is None:
        raise PlanFileError(f"{where}: not a gputrain plan (no schema_version)")
    if version != SCHEMA_VERSION:
        raise PlanFileError(f"{where}: plan of schema version {version!r}; this gputrain reads version "
                            f"{SCHEMA_VERSION}: plan the recipe again with this gputrain")
    try:
        return JobPlan.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err["loc"]) or "(plan)"
        more = f" (+{exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        raise PlanFileError(f"{where}: invalid plan: {field}: {err['msg']}{more}") from None


def load_job_plan(path: str | Path) -> JobPlan:
    """Read ``plan.json`` through the contract: missing, unreadable, foreign or other-version files are one-line
    :class:`PlanFileError` s."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise PlanFileError(f"{path}: plan file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise PlanFileError(f"{path}: cannot read plan ({exc})") from None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise PlanFileError(f"{path}: not a gputrain plan (not JSON: {exc})") from None
    return parse_job_plan(data, str(path))
