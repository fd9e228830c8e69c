"""``algorithm:`` settings shared by the GRPO-family entrypoints (grpo_code, grpo_math, gdpo).

One model for all three because they run one core (``gputrain.train.grpo``): a field means the same thing
in every recipe. Batch vocabulary follows verl's, which the B200 GDPO table is written in:

- ``train_batch_size``: prompts per rollout step, whole job (each prompt is sampled ``num_generations``
  times, so a step scores ``train_batch_size × num_generations`` completions);
- ``ppo_mini_batch_size``: prompts per optimizer update, whole job (``train_batch_size /
  ppo_mini_batch_size`` updates per rollout, times ``num_iterations``);
- ``train.batch_size`` (recipe's train section): completions per forward/backward on one GPU (micro-batch).

Left at null, ``train_batch_size`` is one micro-batch of completions per rank turned into prompts
(``world × max(1, train.batch_size // num_generations)``) and ``ppo_mini_batch_size`` equals it.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class GRPOAlgorithm(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # Sampling
    num_generations: int = Field(default=8, ge=2, description="group size G: completions per prompt")
    temperature: float = Field(default=1.0, gt=0, description="sampling temperature (also scales log-probs)")
    top_p: float = Field(default=1.0, gt=0, le=1)
    top_k: int | None = Field(default=None, gt=0)
    max_prompt_length: int = Field(default=512, gt=0, description="prompts cut to this many tokens")
    max_completion_length: int = Field(default=512, gt=0, description="new tokens per completion (TRL 1.16: 512)")
    rollout_engine: Literal["auto", "hf", "vllm", "sglang"] = Field(
        default="auto",
        description="auto: colocated vLLM when installed, on CUDA, with memory.vllm_gpu_memory_utilization "
        "set, else HF generate; hf: HF generate; vllm: vLLM or a clear error; sglang: SGLang (plan-only; "
        "memory.sglang_mem_fraction_static, and the vllm_mode/vllm_tensor_parallel_size/vllm_sleep_mode/"
        "vllm_enforce_eager placement fields apply to it as its placement, tp_size, memory release and "
        "disable_cuda_graph)",
    )
    generate_cache: Literal["auto", "dynamic", "static"] = Field(
        default="auto",
        description="HF generate's KV cache for rollouts: static lets transformers compile the decode step "
        "(once: prompts left-padded to max_prompt_length, the same rows every step), 4.4x the dynamic cache's "
        "tokens/s on an H200 at 64 x 256 (benchmarks/RESULTS.md); auto: static on CUDA with Triton and an "
        "unsharded policy, else dynamic; a static cache that fails falls back to dynamic with one logged line "
        "(TRL: cache_implementation)",
    )
    prompt_format: Literal["auto", "chat", "raw"] = Field(
        default="auto",
        description="chat: the tokenizer's chat template (task prompt as the user turn); raw: the text as is; "
        "auto: chat when the tokenizer has a template",
    )
    system_prompt: str | None = Field(default=None, description="system turn before each prompt (chat format)")
    vllm_is_correction: bool = Field(
        default=True,
        description="vLLM rollouts: weight each token's policy gradient by min(exp(logp_old - logp_vllm), "
        "vllm_is_cap) (TRL's truncated importance sampling)",
    )
    vllm_is_cap: float = Field(default=3.0, gt=1, description="upper bound of the vLLM importance weight")
    vllm_sleep_mode: bool = Field(
        default=False,
        description="vLLM sleep (level 2) while training, freeing its memory; where the vLLM version has it",
    )

    # Rollout placement and cost shape (planned; see gputrain.planner.plan_only for what runs)
    vllm_mode: Literal["colocate", "server"] = Field(
        default="colocate", description="colocate: vLLM shares each training GPU; server: vLLM on rollout_gpus "
        "dedicated GPUs of the job (TRL vllm_mode=server; plan-only)")
    rollout_gpus: int | None = Field(default=None, gt=0, description="server mode: GPUs of the job for vLLM")
    vllm_tensor_parallel_size: int = Field(default=1, gt=0, description="GPUs per vLLM engine (plan-only)")
    vllm_enforce_eager: bool = Field(default=False, description="vLLM decodes without CUDA graphs (its "
                                     "enforce_eager; verl's default up to v0.5): every kernel pays an eager "
                                     "launch (plan-only)")
    vllm_max_num_seqs: int | None = Field(default=None, gt=0, description="sequences one engine decodes at "
                                          "once (vLLM max_num_seqs, SGLang max_running_requests): more run in "
                                          "waves even where the KV cache holds them; unset: the KV cache "
                                          "alone sets the waves (plan-only)")
    logits_in_place: bool = Field(default=False, description="log-probs by a fused cross-entropy that divides "
                                  "the logits by the temperature in place and writes its gradient into them "
                                  "(verl: flash-attn's kernel, inplace_backward): one [T, V] tensor, not the "
                                  "trainer's copies (plan-only)")
    logprob_vocab_chunk: int | None = Field(default=None, gt=0, description="log-probs by a head that loops "
                                            "over the vocabulary in chunks of this many columns (prime-rl's "
                                            "FusedOutputLinear, fused_lm_head_chunk_size, 2048 in its RL "
                                            "trainer): no [T, V] tensor, a [T, chunk] working set (plan-only)")
    off_policy_steps: int = Field(default=0, ge=0, le=64, description="1: generate step n+1 while training step "
                                  "n (one-step off-policy, step ~ max(rollout, train)); k > 1: generation runs "
                                  "on, up to k steps ahead (NeMo RL's max_trajectory_age_steps, AReaL's "
                                  "max_head_offpolicyness): its engines decode up to k batches at once and a "
                                  "batch's tail overlaps the next batches (plan-only)")
    old_logprob_pass: Literal["auto", "always", "never"] = Field(
        default="auto", description="the old-policy log-prob pass: auto: when a rollout feeds more than one "
        "update (this trainer, TRL); always: every step (verl's trainer recomputes old_log_prob whatever the "
        "mini-batches); never: the rollout engine's log-probs stand in (AReaL, verl's fully async "
        "use_rollout_log_probs) (plan-only)")
    sequence_packing: bool = Field(default=False, description="log-prob and update passes on packed sequences "
                                   "(no compute on padding) instead of padded micro-batches")

    # Batches (see module docstring)
    train_batch_size: int | None = Field(default=None, gt=0, description="prompts per rollout step, global")
    ppo_mini_batch_size: int | None = Field(default=None, gt=0, description="prompts per update, global")
    num_iterations: int = Field(default=1, gt=0, description="passes over each rollout batch (μ)")

    # Objective
    loss_type: Literal["grpo", "bnpo", "dr_grpo", "dapo"] = Field(
        default="dapo",
        description="grpo: mean per sequence then over sequences; bnpo: token mean per micro-batch; "
        "dr_grpo: sum / (sequences × max_completion_length); dapo: token mean over the whole update",
    )
    beta: float = Field(default=0.04, ge=0, description="weight of the k3 KL to the reference (0: none)")
    kl_ratio_correction: bool = Field(
        default=True, description="k3 KL times the policy ratio (TRL 1.16 default)"
    )
    epsilon_low: float = Field(default=0.2, gt=0, lt=1, description="ratio clip below: 1 - epsilon_low")
    epsilon_high: float = Field(default=0.2, gt=0, description="clip above: 1 + epsilon_high (DAPO 0.28)")
    entropy_coeff: float = Field(
        default=0.0, ge=0, description="entropy bonus: loss minus entropy_coeff × mean token entropy (verl)"
    )
    mask_truncated_completions: bool = Field(
        default=False, description="drop completions that hit max_completion_length from the loss"
    )

    # Rewards and advantages
    rewards: list[str] = Field(
        default_factory=list, description="reward components by name (entrypoint default when empty)"
    )
    reward_weights: list[float] | None = Field(default=None, description="one weight per reward component")
    scale_rewards: Literal["group", "batch", "none"] = "group"
    multi_objective_aggregation: Literal["sum_then_normalize", "normalize_then_sum"] = Field(
        default="sum_then_normalize", description="normalize_then_sum is GDPO"
    )
    length_budget: int | None = Field(
        default=None, gt=0, description="token budget of a length reward; below max_completion_length"
    )
    length_gate: Literal["correctness", "format", "none"] = Field(
        default="correctness",
        description="the length reward pays only completions that are correct / well-formed (none: any, "
        "the empty one included)",
    )
    reward_gate: Literal["correctness", "none"] = Field(
        default="none",
        description="correctness: the format and integer rewards pay only correct answers, so a constant "
        "(prompt-independent) answer cannot raise the total; none: they pay any well-formed answer",
    )
    answer_format: Literal["auto", "gsm8k", "boxed"] = Field(
        default="auto",
        description="math: the one final-answer form the prompt asks for and the format reward demands "
        "(gsm8k: '#### n'; boxed: \\boxed{}; auto: the dataset's own); match the model's chat template",
    )

    # Code reward (grpo_code)
    all_or_nothing: bool = Field(default=False, description="code reward 1 only when every assert passes")
    sandbox_workers: int | None = Field(default=None, gt=0, description="programs run at once per rank")
    sandbox_timeout_s: float = Field(default=5.0, gt=0, description="wall-clock limit per program")

    # Supervised warm start (gputrain.train.grpo.warm_start): off unless a recipe opts in
    warm_start_steps: int = Field(
        default=0, ge=0, description="updates of cross-entropy on the task's reference solutions before GRPO "
        "(a from-scratch policy's SFT stage; 0: none, GRPO starts from the model as loaded)",
    )
    warm_start_learning_rate: float | None = Field(
        default=None, gt=0, description="learning rate of the warm start (default: train.learning_rate)"
    )

    # Evaluation (rank 0 only)
    eval_samples: int = Field(default=64, ge=0, description="held-out problems per evaluation (0: none)")
    eval_dataset: Literal["held_out", "humaneval"] = Field(
        default="held_out", description="grpo_code: evaluate on held-out training rows or on HumanEval"
    )
    eval_temperature: float = Field(default=0.0, ge=0, description="0 means greedy decoding")
    eval_max_new_tokens: int | None = Field(default=None, gt=0, description="default: max_completion_length")

    @model_validator(mode="after")
    def _consistent(self) -> GRPOAlgorithm:
        if self.reward_weights is not None and self.rewards and len(self.reward_weights) != len(self.rewards):
            raise ValueError(
                f"reward_weights has {len(self.reward_weights)} values for {len(self.rewards)} rewards"
            )
        if self.length_budget is not None and self.length_budget >= self.max_completion_length:
            raise ValueError(
                f"length_budget {self.length_budget} must be below max_completion_length "
                f"{self.max_completion_length}: at or above it every completion is within budget and the "
                "length reward carries no signal"
            )
        if self.train_batch_size is not None and self.ppo_mini_batch_size is not None:
            if self.ppo_mini_batch_size > self.train_batch_size:
                raise ValueError("ppo_mini_batch_size cannot exceed train_batch_size")
            if self.train_batch_size % self.ppo_mini_batch_size:
                raise ValueError(
                    f"train_batch_size {self.train_batch_size} is not a multiple of "
                    f"ppo_mini_batch_size {self.ppo_mini_batch_size}"
                )
        return self


class GDPOAlgorithm(GRPOAlgorithm):
    """GDPO's settings (entrypoint ``gdpo``): GRPO's, with the per-reward normalisation fixed in the plan and
    auxiliary rewards gated on correctness by default.

    Why a model of its own: the aggregation *is* GDPO, so the resolved plan must say so rather than the entry
    rewriting it at run time; and GDPO is a multi-reward method whose easy rewards (format, integer, length)
    a prompt-independent answer can collect. The paper conditions the easier reward on the harder one; here
    every auxiliary reward is gated on correctness unless a recipe says otherwise, and a GDPO recipe's
    rewards must include ``correctness``.
    """

    multi_objective_aggregation: Literal["normalize_then_sum"] = Field(
        default="normalize_then_sum",
        description="GDPO: per-reward group z-scores, weighted sum, batch z-score (grpo_math sums first)",
    )
    reward_gate: Literal["correctness", "none"] = Field(
        default="correctness",
        description="correctness: format/integer rewards pay only correct answers (a constant answer cannot "
        "raise the total); none: any well-formed answer",
    )

    @model_validator(mode="after")
    def _has_correctness(self) -> GDPOAlgorithm:
        if self.rewards and "correctness" not in self.rewards:
            raise ValueError(
                f"rewards {self.rewards} have no 'correctness': every other reward can be raised by an "
                "answer that ignores the question; add correctness"
            )
        return self
