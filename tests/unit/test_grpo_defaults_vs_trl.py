"""Our GRPO defaults against ``trl.GRPOConfig``'s (trl as installed): any difference must be listed, with its
reason, in ``docs/grpo-defaults-vs-trl.md`` (issue 29); a listed row must still be a difference.

TRL's defaults are read from the dataclass fields (building a ``GRPOConfig`` validates the machine: bf16 on a
CPU is refused), then put into our spelling where the two name one setting differently.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import pytest

from gputrain.recipe.algorithms.grpo import GDPOAlgorithm, GRPOAlgorithm

trl = pytest.importorskip("trl")
pytestmark = pytest.mark.slow  # importing trl takes 10-40 s on the shared 2-core machine

DOC = Path(__file__).resolve().parents[2] / "docs" / "grpo-defaults-vs-trl.md"

#: our field -> TRL field (same setting, maybe another name)
SAME_SETTING = {
    "num_generations": "num_generations",
    "temperature": "temperature",
    "top_p": "top_p",
    "top_k": "top_k",
    "max_completion_length": "max_completion_length",
    "beta": "beta",
    "loss_type": "loss_type",
    "epsilon_low": "epsilon",
    "epsilon_high": "epsilon_high",
    "scale_rewards": "scale_rewards",
    "multi_objective_aggregation": "multi_objective_aggregation",
    "num_iterations": "num_iterations",
    "mask_truncated_completions": "mask_truncated_completions",
    "reward_weights": "reward_weights",
    "vllm_is_correction": "vllm_importance_sampling_correction",
    "vllm_is_cap": "vllm_importance_sampling_clip_max",
    "kl_ratio_correction": "use_bias_correction_kl",
    "entropy_coeff": "entropy_coef",
    "vllm_sleep_mode": "vllm_enable_sleep_mode",
    "vllm_mode": "vllm_mode",
    "vllm_tensor_parallel_size": "vllm_tensor_parallel_size",
}
#: our fields TRL has no counterpart for (or sets elsewhere), each with why
OURS_ONLY = {
    "max_prompt_length": "TRL 1.16 dropped it; we cut prompts so the planner can size memory",
    "rollout_engine": "TRL's use_vllm + vllm_mode; ours picks by what the node has",
    "generate_cache": "TRL's cache_implementation (default None: dynamic); ours auto: static + compiled decode on "
                      "CUDA, decided by the kernel resolver the planner uses",
    "rollout_gpus": "server mode's GPUs inside the job (TRL starts `trl vllm-serve` separately); plan-only",
    "off_policy_steps": "one-step (or k-step) off-policy overlap (verl/NeMo RL/AReaL async); TRL has no such "
                        "setting; plan-only",
    "old_logprob_pass": "when the old-policy log-prob pass runs (verl and NeMo RL: every step; AReaL: never; TRL "
                        "and this trainer: with more than one update, as 'auto'); plan-only",
    "vllm_enforce_eager": "vLLM without CUDA graphs (TRL: only `trl vllm-serve --enforce_eager`); plan-only",
    "vllm_max_num_seqs": "an engine's running-sequence cap (TRL colocate sets vLLM's max_num_seqs to the "
                         "sequences each engine generates, so it never binds); plan-only",
    "logits_in_place": "how the planner prices the log-prob head (verl's fused in-place cross-entropy; TRL: "
                       "use_liger_kernel is another path); plan-only",
    "logprob_vocab_chunk": "how the planner prices a vocabulary-chunked log-prob head (prime-rl's "
                           "FusedOutputLinear; TRL: use_liger_kernel's fused linear cross-entropy); plan-only",
    "sequence_packing": "log-prob/update passes on packed sequences (TRL: padding_free); FlexAttention on "
                        "CUDA, an explicit block mask elsewhere",
    "prompt_format": "TRL reads conversational datasets; ours wraps plain prompts",
    "system_prompt": "as above",
    "train_batch_size": "verl's batch vocabulary (TRL: generation_batch_size from per-device batches)",
    "ppo_mini_batch_size": "verl's batch vocabulary (TRL: steps_per_generation)",
    "rewards": "reward components by name (TRL: reward_funcs passed to the trainer)",
    "length_budget": "a reward setting",
    "length_gate": "a reward setting",
    "reward_gate": "a reward setting",
    "answer_format": "a reward setting",
    "all_or_nothing": "code reward",
    "sandbox_workers": "code reward",
    "sandbox_timeout_s": "code reward",
    "warm_start_steps": "a supervised stage before GRPO (TRL: run SFTTrainer first); off by default",
    "warm_start_learning_rate": "as above",
    "eval_samples": "evaluation",
    "eval_dataset": "evaluation",
    "eval_temperature": "evaluation",
    "eval_max_new_tokens": "evaluation",
}
#: behaviours ours fixes without a field: name in the doc -> (TRL field, TRL value that would mean "same")
FIXED = {"(fixed) vLLM importance correction": ("vllm_importance_sampling_mode", "token_truncate")}


def _trl_defaults() -> dict[str, Any]:
    out = {}
    for f in dataclasses.fields(trl.GRPOConfig):
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = f.default_factory()
    return out


def _in_our_spelling(name: str, value: Any, trl_defaults: dict[str, Any]) -> Any:
    if name == "top_k" and value == 0:
        return None  # 0 disables top-k in TRL; our null does
    if name == "epsilon_high" and value is None:
        return trl_defaults["epsilon"]  # unset: the lower bound's value
    return value


def _listed() -> set[str]:
    lines = DOC.read_text(encoding="utf-8").splitlines()
    rows = [line for line in lines if line.startswith("| ") and not line.startswith("| our field")]
    names = set()
    for row in rows:
        first = row.split("|")[1].strip()
        m = re.match(r"`([a-z_]+)`", first)
        names.add(m.group(1) if m else first)
    return names


def _differences(ours: GRPOAlgorithm) -> set[str]:
    theirs = _trl_defaults()
    diff = set()
    for mine, their in SAME_SETTING.items():
        assert their in theirs, f"TRL has no field {their!r} any more: update the mapping"
        if getattr(ours, mine) != _in_our_spelling(mine, theirs[their], theirs):
            diff.add(mine)
    for name, (their, same) in FIXED.items():
        if theirs[their] != same:
            diff.add(name)
    return diff


def test_every_field_is_compared_or_explained() -> None:
    assert set(GRPOAlgorithm.model_fields) == set(SAME_SETTING) | set(OURS_ONLY)


def test_grpo_defaults_differ_from_trl_only_where_the_doc_says_why() -> None:
    listed = _listed()
    grpo, gdpo = _differences(GRPOAlgorithm()), _differences(GDPOAlgorithm())
    assert grpo - listed == set(), "defaults differing from TRL without a row in the doc"
    assert gdpo - listed == set()
    stale = {n for n in listed if n not in grpo | gdpo | {"reward_gate"}}
    assert stale == set(), "rows in the doc that are no longer differences"
    assert {"beta", "(fixed) vLLM importance correction"} <= grpo  # what issue 29 named
