"""``algorithm:`` settings of the block-diffusion entrypoints (bd3lm, hdp).

One model for both: HDP is BD3-LM driven by a question/plan/execution layout, so a field means the same
thing in both recipes; the ``question_len``/``plan_len``/``exec_len``/``plan_block``/``exec_block`` fields
are read by hdp only. Clip range names follow the BD3-LM paper: t ~ U[β, ω] during training.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class DiffusionAlgorithm(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # Diffusion
    block_size: int = Field(default=4, ge=1, description="L': tokens per diffusion block (bd3lm)")
    noise_schedule: Literal["loglinear"] = Field(default="loglinear", description="α_t = 1 − (1 − ε) t")
    noise_eps: float = Field(default=1e-3, ge=0, lt=1, description="ε: share of tokens left clean at t = 1")
    antithetic: bool = Field(default=True, description="stratified t over all blocks of a batch")
    clip_beta: float = Field(default=0.0, ge=0, lt=1, description="β: lowest training t")
    clip_omega: float = Field(default=1.0, gt=0, le=1, description="ω: highest training t")
    clip_search: bool = Field(default=True, description="at each eval, pick [β, ω] minimising loss variance")
    clip_search_widths: list[float] = Field(
        default=[0.5, 0.7, 0.9, 1.0], min_length=1, description="window widths ω − β tried by the search"
    )
    clip_search_batches: int = Field(default=2, ge=1, description="held-out batches per candidate window")

    # Model
    cond_dim: int = Field(default=128, ge=8, description="width of the time embedding fed to adaLN")
    tokenizer: Literal["auto", "gpt2", "bytes"] = Field(
        default="auto", description="auto: GPT-2 if on disk (never downloaded), else bytes"
    )

    # Evaluation and sampling
    eval_batches: int = Field(default=8, ge=1, description="held-out batches per NELBO evaluation")
    sampling_steps: int | None = Field(default=None, ge=1, description="denoising steps per block (L')")
    num_samples: int = Field(default=8, ge=0, description="sequences written to samples.jsonl at the end")
    sample_temperature: float = Field(default=1.0, gt=0)

    # HDP layout (hdp only)
    question_len: int = Field(default=128, ge=1, description="Q tokens: clean conditioning, no loss")
    plan_len: int = Field(default=128, ge=1, description="P tokens: diffused first")
    exec_len: int = Field(default=256, ge=1, description="E tokens: diffused after P, seeing the clean plan")
    plan_block: int = Field(default=0, ge=0, description="sub-block size inside P (0: the whole plan)")
    exec_block: int = Field(default=0, ge=0, description="sub-block size inside E (0: the whole execution)")

    @model_validator(mode="after")
    def _consistent(self) -> DiffusionAlgorithm:
        if self.clip_beta >= self.clip_omega:
            raise ValueError(f"clip_beta ({self.clip_beta}) must be below clip_omega ({self.clip_omega})")
        bad = [w for w in self.clip_search_widths if not 0 < w <= 1]
        if bad:
            raise ValueError(f"clip_search_widths must lie in (0, 1], got {bad}")
        for name, size, seg in (("plan_block", self.plan_block, self.plan_len),
                                ("exec_block", self.exec_block, self.exec_len)):
            if size and seg % size:
                raise ValueError(f"{name}={size} must divide its segment length {seg} (or be 0)")
        return self

    @property
    def hdp_length(self) -> int:
        return self.question_len + self.plan_len + self.exec_len
