"""The recipe schema: what a YAML training recipe may say, checked strictly.

Every model forbids unknown keys, so a typo (``batch_sise``) is an error with a hint instead of a silently
ignored setting. The ``algorithm`` section differs per entrypoint; it is validated by the model that
``gputrain.recipe.entrypoints`` names for the recipe's entrypoint and kept as that typed model
(:data:`AlgorithmSettings`), so a training reads ``recipe.algorithm.num_generations``, not a dict.
``profiles`` hold partial recipes; they are checked in full only after the planner merges one in.
"""

from __future__ import annotations

import importlib
import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from gputrain.recipe.algorithms.diffusion import DiffusionAlgorithm
from gputrain.recipe.algorithms.gnn_coloring import GNNColoringAlgorithm
from gputrain.recipe.algorithms.grpo import GDPOAlgorithm, GRPOAlgorithm
from gputrain.recipe.algorithms.selftest import SelftestAlgorithm
from gputrain.recipe.entrypoints import ENTRYPOINTS
from gputrain.recipe.env_policy import RUNTIME_SWITCH_RE, check_env_name, check_env_value

#: The ``algorithm:`` settings of any entrypoint; which one a recipe holds is decided by its entrypoint
#: (``ENTRYPOINTS[...].algorithm``), never by trying the members in turn.
AlgorithmSettings = SelftestAlgorithm | GNNColoringAlgorithm | DiffusionAlgorithm | GDPOAlgorithm | GRPOAlgorithm

#: Entrypoints that generate their data (graphs, all-reduce payloads): ``data.source`` must be ``generated``.
GENERATED_DATA_ONLY = ("gnn_coloring", "selftest")
#: Entrypoints whose generated data is the arithmetic ``data.max_operand`` sizes.
GENERATED_ARITHMETIC = ("grpo_math", "gdpo")

# Validating patterns are anchored with \A...\Z: Python's ``$`` also matches before a trailing newline.
_TIME_RE = re.compile(r"\A(?:(\d+)-)?(\d{1,3}):([0-5]\d):([0-5]\d)\Z")
_ENV_NAME_RE = re.compile(r"\A[A-Za-z_][A-Za-z0-9_]*\Z")
_RECIPE_NAME_RE = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9_.-]*\Z")
#: Credentials of the machine that launches jobs: forwarding them would hand a pod (or anything the
#: training runs) the power to create, bill and delete your other pods, or to use your ssh agent.
LAUNCHER_CREDENTIALS = ("RUNPOD_API_KEY", "SSH_AUTH_SOCK")
LAUNCHER_CREDENTIAL_PREFIXES = ("RUNPOD_",)


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)


class ModelSpec(Strict):
    name: str = Field(description="Hugging Face id or built-in architecture name")
    size: str | None = Field(default=None, description="size label such as '1.5B', used to pick presets")
    params: float | None = Field(default=None, gt=0, description="parameter count, for estimates")
    hidden_size: int | None = Field(default=None, gt=0)
    num_layers: int | None = Field(default=None, gt=0)
    num_heads: int | None = Field(default=None, gt=0)
    num_kv_heads: int | None = Field(default=None, gt=0, description="key/value heads (GQA); default num_heads")
    head_dim: int | None = Field(default=None, gt=0, description="width of one attention head (the model config's "
                                 "head_dim; Qwen3: 128, wider than hidden_size / num_heads); default "
                                 "hidden_size / num_heads")
    vocab_size: int | None = Field(default=None, gt=0)
    seq_len: int | None = Field(default=None, gt=0, description="tokens per sample")
    active_params: float | None = Field(
        default=None, gt=0, description="mixture-of-experts: parameters active per token (compute); params is "
        "the total (memory)")
    experts_per_token: int | None = Field(default=None, gt=0, description="mixture-of-experts: experts a "
                                          "token is routed to (config num_experts_per_tok; estimate only: the "
                                          "routed copies of each token's hidden state)")
    num_experts: int | None = Field(default=None, gt=0, description="mixture-of-experts: routed experts per "
                                    "layer (config num_experts; estimate only: the router's scores)")
    lora_rank: int | None = Field(default=None, gt=0, description="train low-rank adapters of this rank on "
                                  "the frozen model (peft LoRA; the RL trainings; TRL's lora_r)")
    lora_alpha: int = Field(default=32, gt=0, description="LoRA scaling numerator: updates scale by "
                              "alpha / rank (TRL's ModelConfig default 32)")
    lora_dropout: float = Field(default=0.05, ge=0, lt=1, description="dropout on the adapters' input (TRL 0.05)")
    lora_target_modules: list[str] | None = Field(default=None, description="module names that get adapters; "
                                                  "unset: peft's default for the architecture (as TRL)")


class DataSpec(Strict):
    source: str = Field(default="generated", description="'generated', a local path, or a hub dataset name")
    format: Literal["auto", "json", "jsonl", "parquet", "generated"] = "auto"
    train_size: int | None = Field(default=None, gt=0)
    val_size: int | None = Field(default=None, ge=0)
    split: str | None = None
    max_operand: int | None = Field(
        default=None, ge=2, le=20, description="grpo_math/gdpo generated arithmetic: largest operand (default "
        "20; products stay 2..9); 9 keeps every operand one digit, a task a from-scratch CPU policy can learn",
    )


class TrainSpec(Strict):
    batch_size: int = Field(gt=0, description="micro-batch per GPU")
    grad_accum: int = Field(default=1, gt=0)
    epochs: int | None = Field(default=None, gt=0)
    max_steps: int | None = Field(default=None, gt=0)
    learning_rate: float = Field(gt=0)
    lr_scaling: Literal["none", "linear", "sqrt"] = "none"
    reference_batch: int | None = Field(
        default=None, gt=0, description="global batch at which learning_rate holds (for lr_scaling)"
    )
    lr_table: dict[int, float] = Field(
        default_factory=dict, description="global batch → learning rate from a source table (shown)"
    )
    lr_schedule: Literal["constant", "cosine", "linear"] = "cosine"
    warmup_steps: int = Field(default=0, ge=0)
    weight_decay: float = Field(default=0.0, ge=0)
    grad_clip: float | None = Field(default=1.0, gt=0)
    precision: Literal["auto", "bf16", "fp16", "fp32"] = "auto"
    attention: Literal["auto", "sdpa", "flash", "flex", "eager"] = "auto"
    gradient_checkpointing: bool = False
    compile: bool | Literal["auto"] = False  # auto: where the kernel resolver says it pays (gputrain.contract.kernels)
    seed: int = 0
    log_every: int = Field(default=10, gt=0)
    eval_every: int | None = Field(default=None, gt=0)
    save_every: int | None = Field(default=None, gt=0)
    keep_checkpoints: int = Field(default=3, gt=0)
    num_workers: int = Field(default=2, ge=0)

    @model_validator(mode="after")
    def _length_given(self) -> TrainSpec:
        if self.epochs is None and self.max_steps is None:
            raise ValueError("give train.epochs or train.max_steps")
        return self


class MemorySpec(Strict):
    vllm_gpu_memory_utilization: float | None = Field(
        default=None, gt=0, le=1, description="share of GPU memory vLLM may take (null: no vLLM)"
    )
    sglang_mem_fraction_static: float | None = Field(
        default=None, gt=0, lt=1, description="algorithm.rollout_engine=sglang: SGLang's mem_fraction_static, "
        "the share of GPU memory for its weights and KV pool (null: SGLang's default for the GPU)")
    offload_during_rollout: bool = Field(
        default=False, description="RL, colocated vLLM: the trainer moves its weights, gradients and optimizer "
        "states to the host while vLLM generates and back before the update (NeMo RL's Megatron worker, "
        "offload_before_refit / offload_after_refit); plan-only")
    reference_on_host: bool = Field(
        default=False, description="RL, beta > 0: the frozen reference weights live in pinned host memory and "
        "are swapped into the policy for their log-prob pass (NeMo RL's reference state dict); plan-only")
    activations_on_host: bool = Field(
        default=False, description="tensors the forward saves for backward go to pinned host memory and come "
        "back in the backward (torchtune's OffloadActivations, prime-rl's --model.ac-offloading); with "
        "recomputation these are the layer inputs; plan-only")


class DistributedSpec(Strict):
    strategy: Literal["ddp", "fsdp", "deepspeed", "none"] = "ddp"
    backend: Literal["auto", "nccl", "gloo"] = "auto"
    sharding: Literal["auto", "zero1", "zero2", "zero3"] = Field(
        default="auto", description="auto: what the trainer runs for the strategy (fsdp: FSDP2, full unsharded "
        "gradients while accumulating; deepspeed: DDP); zero1/2/3: optimizer / + gradients / + weights "
        "sharded, gradients reduce-scattered per micro-batch (plan-only)")
    tensor_parallel: int = Field(default=1, gt=0, description="training tensor parallelism (plan-only)")
    pipeline_parallel: int = Field(default=1, gt=0, description="training pipeline stages (plan-only)")
    expert_parallel: int = Field(default=1, gt=0, description="mixture-of-experts: experts split over this many "
                                 "ranks (plan-only)")
    cpu_offload: bool = Field(default=False, description="fp32 weights and optimizer on the host (plan-only)")
    grads_in_fp32: bool = Field(default=True, description="false: gradients accumulate and reduce in the compute "
                                "dtype (Megatron's grad_reduce_in_fp32: false; with distributed.sharding zero1/2/3) "
                                "(plan-only)")


class ResourcesSpec(Strict):
    gpus: int = Field(default=1, gt=0, description="GPUs per node")
    nodes: int = Field(default=1, gt=0)
    time: str = Field(default="12:00:00", description="wall-clock limit, [D-]HH:MM:SS")
    memory_gb: int | None = Field(default=None, gt=0, description="host memory per node")
    cpus_per_gpu: int = Field(default=4, gt=0)

    @field_validator("time")
    @classmethod
    def _time_format(cls, value: str) -> str:
        if not _TIME_RE.match(value):
            raise ValueError(f"time must look like HH:MM:SS or D-HH:MM:SS, got {value!r}")
        return value


class TrackingSpec(Strict):
    wandb: bool = False
    tensorboard: bool = False
    project: str = "gputrain"


class GuideFigure(Strict):
    """What the workload's own guide reports for one hardware setting (the planner's outside reference)."""

    source: str = Field(description="which guide, which table")
    gpu: str = Field(description="catalog GPU name the figure is for")
    gpus: int = Field(default=1, gt=0, description="GPUs in the guide's setting (whole job)")
    preset: str | None = Field(default=None, description="the profile preset the figure belongs to")
    step_seconds: float | None = Field(default=None, gt=0)
    total_hours: float | None = Field(default=None, gt=0)
    memory_gib: float | None = Field(default=None, gt=0, description="per GPU")
    differs: str = Field(default="", description="why this recipe as written is a different job, if it is")


class EstimateSpec(Strict):
    flops_per_sample: float | None = Field(default=None, gt=0, description="training FLOPs per sample")
    tokens_per_sample: int | None = Field(default=None, gt=0)
    mfu: float = Field(default=0.35, gt=0, le=1, description="assumed model FLOPs utilisation: an override "
                       "shown as assumed (RL recipes leave it unset and the planner uses its own efficiency)")
    completion_fraction: float = Field(
        default=0.7, gt=0, le=1, description="RL: expected completion length as a share of max_completion_length"
    )
    prompt_fraction: float = Field(
        default=0.5, gt=0, le=1, description="RL: expected prompt length as a share of max_prompt_length"
    )
    guides: list[GuideFigure] = Field(default_factory=list, description="the guide's reported figures")


class Profile(Strict):
    """Settings for one GPU type: a partial recipe plus optional named presets."""

    description: str | None = None
    set: dict[str, Any] = Field(default_factory=dict, description="partial recipe merged over the base")
    presets: dict[str, dict[str, Any]] = Field(default_factory=dict)
    default_preset: str | None = None
    preset_by: str | None = Field(default=None, description="dotted field whose value names the preset")

    @model_validator(mode="after")
    def _preset_known(self) -> Profile:
        if self.default_preset is not None and self.default_preset not in self.presets:
            raise ValueError(f"default_preset {self.default_preset!r} is not one of {sorted(self.presets)}")
        return self


class Recipe(Strict):
    name: str = Field(description="letters, digits, '_', '.', '-'; it names jobs and folders")
    description: str = ""
    entrypoint: str
    model: ModelSpec
    data: DataSpec = Field(default_factory=DataSpec)
    train: TrainSpec
    algorithm: AlgorithmSettings = Field(
        default_factory=dict,  # turned into the entrypoint's model by the validator below
        validate_default=True,
        description="settings of the entrypoint's algorithm (the model named in gputrain.recipe.entrypoints)",
    )
    memory: MemorySpec = Field(default_factory=MemorySpec)
    distributed: DistributedSpec = Field(default_factory=DistributedSpec)
    resources: ResourcesSpec = Field(default_factory=ResourcesSpec)
    env: dict[Annotated[str, AfterValidator(check_env_name)], Annotated[str, AfterValidator(check_env_value)]] = Field(
        default_factory=dict, description="variables exported to the job: library knobs only "
        "(gputrain.recipe.env_policy)")
    secrets: list[str] = Field(default_factory=list)
    tracking: TrackingSpec = Field(default_factory=TrackingSpec)
    estimate: EstimateSpec = Field(default_factory=EstimateSpec)
    profiles: dict[str, Profile] = Field(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _plain_name(cls, value: str) -> str:
        if not _RECIPE_NAME_RE.match(value):
            raise ValueError(f"name {value!r} must be letters, digits, '_', '.' or '-' (starting with a letter "
                             "or digit)")
        return value

    @field_validator("entrypoint")
    @classmethod
    def _known_entrypoint(cls, value: str) -> str:
        if value not in ENTRYPOINTS:
            raise ValueError(f"unknown entrypoint {value!r}; known: {', '.join(sorted(ENTRYPOINTS))}")
        return value

    @field_validator("data")
    @classmethod
    def _source_honoured(cls, value: DataSpec, info: ValidationInfo) -> DataSpec:
        """A documented field is honoured or refused: entrypoints that generate their own data read no file,
        so another ``data.source`` would be silently ignored (issue 31)."""
        entrypoint = info.data.get("entrypoint")
        if entrypoint in GENERATED_DATA_ONLY and value.source != "generated":
            raise ValueError(f"data.source {value.source!r}: {entrypoint} trains on data it generates itself and "
                             "reads no files; use data.source: generated (sizes: data.train_size, data.val_size)")
        if value.max_operand is not None and entrypoint not in GENERATED_ARITHMETIC:
            raise ValueError(f"data.max_operand sizes the arithmetic that grpo_math and gdpo generate; {entrypoint} "
                             "would ignore it: remove it")
        return value

    @field_validator("algorithm", mode="before")
    @classmethod
    def _algorithm_of_entrypoint(cls, value: Any, info: ValidationInfo) -> Any:
        entrypoint = info.data.get("entrypoint")
        if entrypoint not in ENTRYPOINTS:
            return value  # an unknown entrypoint is reported on its own field
        model = algorithm_model(entrypoint)
        if type(value) is model:
            return value
        if isinstance(value, BaseModel):  # another entrypoint's settings: checked field by field
            value = value.model_dump()
        return model.model_validate(value)

    @field_validator("secrets")
    @classmethod
    def _secret_names(cls, value: list[str]) -> list[str]:
        for name in value:
            if not _ENV_NAME_RE.match(name):
                raise ValueError(f"secret {name!r} must be an environment variable name, never a value")
            if is_launcher_credential(name):
                raise ValueError(f"secret {name} is a credential of the launching machine; a recipe may not "
                                 "forward it to a job")
            if is_runtime_switch(name):
                raise ValueError(f"secret {name} is a switch of the shell, loader, interpreter or gputrain, not a "
                                 "secret; a recipe may not forward it to a job")
        return value


def is_launcher_credential(name: str) -> bool:
    return name in LAUNCHER_CREDENTIALS or name.startswith(LAUNCHER_CREDENTIAL_PREFIXES)


def is_runtime_switch(name: str) -> bool:
    """A variable of the shell, loader, interpreter or gputrain itself: never a secret to forward."""
    return bool(RUNTIME_SWITCH_RE.match(name))


def algorithm_model(entrypoint: str) -> type[BaseModel]:
    """The ``algorithm:`` model of an entrypoint (``ENTRYPOINTS`` names it as "module:Class")."""
    target = ENTRYPOINTS[entrypoint].algorithm
    module_name, _, class_name = target.partition(":")
    module = importlib.import_module(module_name)
    model_cls: type[BaseModel] = getattr(module, class_name)
    return model_cls
