"""What a metric name means: which way is better, its unit, the group it is shown in.

A summary must not call the largest learning rate "best": ``lr``, ``epoch``, ``grad_norm`` and counters have
no direction. Names are matched exactly, then by the first matching pattern (so ``eval_loss``,
``actor/pg_loss`` and ``rewards/accuracy_reward/mean`` are understood), and an unknown key is still
summarized (first/last/min/max) with no "best". Groups order the table and the panels of ``curves.png``:
losses, rewards (one row per reward component), completions, learning rate, throughput, memory, the
diffusion NELBO terms, the GNN colouring conflicts, then the rest.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

LOWER, HIGHER, NONE = "lower", "higher", None


@dataclass(frozen=True, slots=True)
class MetricInfo:
    """``better`` is "lower", "higher" or None (no best: a schedule, a counter, a diagnostic)."""

    better: str | None
    group: str
    unit: str = ""


GROUP_ORDER = ("loss", "reward", "completions", "lr", "throughput", "memory", "nelbo", "conflicts", "other")

_EXACT: dict[str, MetricInfo] = {
    "loss": MetricInfo(LOWER, "loss"),
    "eval_loss": MetricInfo(LOWER, "loss"),
    "train_loss": MetricInfo(LOWER, "loss"),
    "val_loss": MetricInfo(LOWER, "loss"),
    "lr": MetricInfo(NONE, "lr"),
    "epoch": MetricInfo(NONE, "other", "epoch"),
    "grad_norm": MetricInfo(NONE, "other"),
    "reward": MetricInfo(HIGHER, "reward"),
    "reward_std": MetricInfo(NONE, "reward"),
    "reward_mean": MetricInfo(HIGHER, "reward"),
    "frac_reward_zero_std": MetricInfo(NONE, "reward"),
    "entropy": MetricInfo(NONE, "other", "nats"),
    "kl": MetricInfo(NONE, "other"),
    "num_tokens": MetricInfo(NONE, "other", "tokens"),
    "mean_token_accuracy": MetricInfo(HIGHER, "other"),
    "tokens_per_s": MetricInfo(HIGHER, "throughput", "tokens/s"),
    "samples_per_s": MetricInfo(HIGHER, "throughput", "samples/s"),
    "steps_per_s": MetricInfo(HIGHER, "throughput", "steps/s"),
    "train_steps_per_second": MetricInfo(HIGHER, "throughput", "steps/s"),
    "step_time": MetricInfo(LOWER, "throughput", "s"),
    "step_time_s": MetricInfo(LOWER, "throughput", "s"),
    "step_time_ms": MetricInfo(LOWER, "throughput", "ms"),
    "dt_ms": MetricInfo(LOWER, "throughput", "ms"),
    "mfu": MetricInfo(HIGHER, "throughput", "%"),
    "tflops": MetricInfo(HIGHER, "throughput", "TFLOP/s"),
    "gpu_mem_gib": MetricInfo(NONE, "memory", "GiB"),
    "train_runtime": MetricInfo(NONE, "other", "s"),
    "nelbo": MetricInfo(LOWER, "nelbo"),
    "conflicts": MetricInfo(LOWER, "conflicts"),
    "conflicts_per_edge": MetricInfo(LOWER, "conflicts"),
    "val_conflicts_per_edge": MetricInfo(LOWER, "conflicts"),
    "network_proper_share": MetricInfo(HIGHER, "conflicts"),
}

#: (pattern, info): first match wins. Order matters: specific before generic.
_PATTERNS: list[tuple[re.Pattern[str], MetricInfo]] = [
    (re.compile(r"(^|/)rewards?/.*/(std|min|max|frac_zero_std)$"), MetricInfo(NONE, "reward")),
    (re.compile(r"(^|/)rewards?/.*(mean|reward)?$"), MetricInfo(HIGHER, "reward")),
    (re.compile(r"(^|/)(score|rewards)/(mean)$|/score/mean$|/rewards/mean$"), MetricInfo(HIGHER, "reward")),
    (re.compile(r"/(score|rewards)/(max|min)$|reward_std|advantages"), MetricInfo(NONE, "reward")),
    (re.compile(r"^completions?/|^response_length/|^prompt_length/"), MetricInfo(NONE, "completions", "tokens")),
    (re.compile(r"nelbo|nll|bpd|perplexity|ppl"), MetricInfo(LOWER, "nelbo")),
    (re.compile(r"conflict"), MetricInfo(LOWER, "conflicts")),
    (re.compile(r"(^|[/_])loss($|[/_])|_loss$|^loss"), MetricInfo(LOWER, "loss")),
    (re.compile(r"(^|_)(acc|accuracy|pass@?\d*|f1|bleu|exact_match)($|[/_@])|accuracy|accuracies"),
     MetricInfo(HIGHER, "other")),
    (re.compile(r"(^|/)(lr|learning_rate)$"), MetricInfo(NONE, "lr")),
    (re.compile(r"tokens_per_s|per_second|samples_per_s|throughput|tok/s|/tps$"),
     MetricInfo(HIGHER, "throughput")),
    (re.compile(r"^timing_s/|_time$|_ms$|runtime"), MetricInfo(NONE, "throughput", "s")),
    (re.compile(r"mem|memory"), MetricInfo(NONE, "memory")),
    (re.compile(r"grad_norm|clip|entropy|kl|logps|logits|epoch|step|num_|count|_len"), MetricInfo(NONE, "other")),
]

_UNKNOWN = MetricInfo(NONE, "other")


def metric_info(key: str) -> MetricInfo:
    """What is known about ``key`` (exact name first, then patterns); unknown keys have no direction."""
    info = _EXACT.get(key)
    if info is not None:
        return info
    low = key.lower()
    for pattern, found in _PATTERNS:
        if pattern.search(low):
            return found
    return _UNKNOWN


def group_rank(key: str) -> tuple[int, str]:
    """Sort key: by group (losses first), then by name."""
    return GROUP_ORDER.index(metric_info(key).group), key
