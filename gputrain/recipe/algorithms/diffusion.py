"""``algorithm:`` settings of the block-diffusion entrypoints (bd3lm, hdp).

One model for both: HDP is BD3-LM driven by a question/plan/execution layout, so a field means the same
thing in both recipes; the ``question_len``/``plan_len``/``exec_len``/``plan_block``/``exec_block`` fields
are read by hdp only. Clip range names follow the BD3-LM paper: t ~ U[β, ω] during training.

Every default is the reference's choice (kuleshov-group/bd3lms: ``configs/config.yaml``,
``configs/algo/bd3lm.yaml``, ``configs/model/small.yaml``, ``scripts/train/train_owt_bd3lm.sh``,
``scripts/gen_ppl/genppl_bd3lm.sh``); a field that departs from it is a switch whose description says what
the reference does. The speed switches (#27) default to the faster path: they compute the reference's values
and gradients. The reference does not need ``loss_on_padding``: it trains OpenWebText packed, and its
unpacked datasets weight the loss by the attention mask, which is what ``loss_on_padding: false`` does.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class DiffusionAlgorithm(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # Diffusion
    block_size: int = Field(default=4, ge=1, description="L': tokens per diffusion block (bd3lm)")
    noise_schedule: Literal["loglinear"] = Field(default="loglinear", description="α_t = 1 − (1 − ε) t")
    noise_eps: float = Field(default=1e-3, ge=0, lt=1, description="ε: share of tokens left clean at t = 1")
    antithetic: bool = Field(default=True, description="stratified t over all blocks of a batch")
    time_conditioning: bool = Field(
        default=False, description="feed t to the network (reference: algo.time_conditioning false)"
    )
    loss_on_padding: bool = Field(
        default=False, description="count end-of-text padding in loss and NELBO (reference: attention-masked)"
    )
    clip_beta: float = Field(default=0.0, ge=0, lt=1, description="β: lowest training t")
    clip_omega: float = Field(default=1.0, gt=0, le=1, description="ω: highest training t")
    clip_resample: bool = Field(
        default=False, description="redraw a block's mask until its masked share lies in [β, ω]: for "
        "fine-tuning from a checkpoint that learnt every mask rate (the paper's second stage); off while "
        "training from scratch or warming up (reference: training.resample false by default)"
    )
    clip_search: bool = Field(default=True, description="at each eval, pick [β, ω] minimising per-block variance")
    clip_search_widths: list[float] = Field(
        default=[0.5, 0.6, 0.7, 0.8, 0.9], min_length=1,
        description="window widths ω − β tried by the search, besides the full [0, 1]",
    )
    clip_search_delta: float = Field(default=0.05, gt=0, le=0.5, description="stride between window starts")
    clip_search_batches: int = Field(default=2, ge=1, description="held-out batches shared by every window")

    # Model and optimizer (the reference's ``model.dropout`` and ``optim`` section)
    cond_dim: int = Field(default=128, ge=8, description="width of the time embedding fed to adaLN")
    dropout: float = Field(default=0.1, ge=0, lt=1, description="on the attention and MLP branches")
    adam_betas: tuple[float, float] = Field(default=(0.9, 0.999), description="AdamW β1, β2")
    adam_eps: float = Field(default=1e-8, gt=0)
    ema: float = Field(
        default=0.9999, ge=0, lt=1,
        description="EMA decay of the weights used to evaluate and sample (0: none); ramps as (1+n)/(10+n)",
    )
    # Speed (#27): same values and gradients whichever is set (tests/unit/test_diffusion_fast_paths.py). The
    # defaults are the measured-faster path (H200, b32 s1024: 0.148 s -> 0.1315 s per step, 37.2 -> 28.9 GiB
    # allocated; benchmarks/RESULTS.md 2026-11-27); the reference computes eager per-token modulation and loss.
    shared_modulation: bool = Field(
        default=True, description="without time_conditioning, compute adaLN's shift/scale/gate once per "
        "sequence and broadcast them (no per-token gather, no scatter-add in backward); with "
        "time_conditioning on it does not apply (reference: per token)"
    )
    loss_kernel: Literal["torch", "chunked", "compiled"] = Field(
        default="compiled", description="the output head and the loss: eager full logits (torch, the "
        "reference), chunk by chunk without the logits tensor (chunked), or one torch.compile'd function where "
        "the blocks are compiled (compiled; eager torch elsewhere)"
    )
    compile_mode: Literal["default", "autotune-attention", "max-autotune-no-cudagraphs"] = Field(
        default="default", description="torch.compile mode of the blocks: autotune-attention benchmarks "
        "FlexAttention's tile sizes (GEMMs stay cuBLAS; H200: 2.7 % faster step for ~45 s more compile, the "
        "long-run option), max-autotune-no-cudagraphs also the GEMMs and pointwise kernels; both compile longer"
    )
    tokenizer: Literal["auto", "gpt2", "bytes"] = Field(
        default="auto", description="auto: GPT-2 if on disk (never downloaded), else bytes"
    )

    # Evaluation and sampling
    eval_batches: int = Field(default=8, ge=1, description="held-out batches per NELBO evaluation")
    sampling_steps: int | None = Field(
        default=None, ge=1, description="denoising steps per block without first hitting (null: block length)"
    )
    first_hitting: bool = Field(
        default=True, description="reveal exactly one token per step (Zheng et al.; reference default)"
    )
    nucleus_p: float = Field(default=0.9, gt=0, le=1, description="top-p of each token's distribution")
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
        if not all(0 < b < 1 and math.isfinite(b) for b in self.adam_betas):
            raise ValueError(f"adam_betas must lie in (0, 1), got {list(self.adam_betas)}")
        for name, size, seg in (("plan_block", self.plan_block, self.plan_len),
                                ("exec_block", self.exec_block, self.exec_len)):
            if size and seg % size:
                raise ValueError(f"{name}={size} must divide its segment length {seg} (or be 0)")
        return self

    @property
    def hdp_length(self) -> int:
        return self.question_len + self.plan_len + self.exec_len
