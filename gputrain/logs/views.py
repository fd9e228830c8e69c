"""Parts of a summary computed from the metric table and the causes: per-metric entries with "best" only
where it means something, the RL view (reward, components, completion length), the traceback to show, and
the metrics worth a curve."""

from __future__ import annotations

import re
from typing import Any

from gputrain.logs.catalog import group_rank, metric_info
from gputrain.logs.stats import MetricTable

SCHEDULER_FAILURES = frozenset({"TIMEOUT", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY", "DEADLINE"})


def metric_entry(key: str, table: MetricTable, rl: bool = False) -> dict[str, Any]:
    """first/last/min/max/median for every metric; "best" only where the catalog knows which way is better.

    In an RL run the training "loss" is the policy-gradient surrogate (it can be negative, and lower is not
    better): it gets no best; rewards say how the run goes.
    """
    stats = table.metrics[key]
    info = metric_info(key)
    policy_loss = rl and info.group == "loss" and not key.startswith(("eval", "val"))
    best = None if policy_loss else stats.best(key)
    return {
        "first": stats.first[1],
        "last": stats.last[1],
        "last_step": stats.last[0],
        "min": stats.lo[1],
        "max": stats.hi[1],
        "best": best[1] if best else None,
        "best_step": best[0] if best else None,
        "better": None if policy_loss else info.better,
        "group": info.group,
        "unit": info.unit,
        "count": stats.count,
        "median": stats.median(),
        "nonfinite": stats.nonfinite,
        "nonfinite_first_step": stats.nonfinite_first[0] if stats.nonfinite_first else None,
        "nonfinite_first_value": stats.nonfinite_first[1] if stats.nonfinite_first else None,
    }


def nonfinite_alerts(metrics: dict[str, dict[str, Any]]) -> list[str]:
    """One headline per metric that went NaN/Inf: a diverged run must not look healthy in its table."""
    out = []
    for key, entry in metrics.items():
        if not entry.get("nonfinite"):
            continue
        last, first = entry["last"], entry.get("nonfinite_first_value")
        what = "Inf" if first is not None and first == first else "NaN"
        end = f"still {'NaN' if last != last else 'Inf'} at the end" if last - last != 0 else f"{last:.4g} at the end"
        out.append(f"{key} went {what} at step {entry['nonfinite_first_step']:g} "
                   f"({entry['nonfinite']} of {entry['count']} values; {end})")
    return out


#: A dynamic loss scaler lowering its scale after an overflow, in the words apex ("reducing loss scale to 0.03"),
#: DeepSpeed ("Reducing dynamic loss scale from 2 to 1", "Attempted loss scale: 1, reducing to 1") and fairseq
#: ("setting loss scale to: 0.0005") use: the scale it left (``to``) and, where said, the one it tried (``from``).
_SCALE_RE = re.compile(r"loss scale(?:[:=]? (?P<tried>\d[\d.e+-]*),? ?| from (?P<frm>\d[\d.e+-]*) )?[^\n]{0,40}?"
                       r"\bto:? (?P<to>\d[\d.e+-]*\d|\d)", re.IGNORECASE)
#: float16's smallest normal number (2**-14): a scale below it means the gradients overflow even when shrunk by
#: far more than fp16's whole range can make up; the run has diverged, whatever the loss still prints.
FP16_TINY = 2.0**-14


def loss_scale_alerts(tail: str) -> list[str]:
    """A headline when the last loss-scale change shows fp16 training that can no longer take a step: the scale
    fell below :data:`FP16_TINY`, or an overflow at a scale of 1 or less left it where it was (the scaler is at
    its floor, DeepSpeed's default minimum being 1, and every step is skipped). A scaler still above 1, or
    stepping down from a large scale, is routine (fp16 probes the largest scale that does not overflow)."""
    last = next(iter(reversed(list(_SCALE_RE.finditer(tail)))), None)
    if last is None:
        return []
    try:
        to = float(last.group("to"))
        tried = last.group("tried") or last.group("frm")
        before = float(tried) if tried else None
    except ValueError:
        return []
    if to < FP16_TINY:
        return [f"fp16 loss scale fell to {to:.3g} (below fp16's smallest normal): every step overflows, the run "
                "has diverged"]
    if to <= 1 and before == to:
        return [f"fp16 loss scale stuck at its minimum ({to:g}) and still overflowing: every step is skipped, the "
                "run no longer learns"]
    return []


def rl_view(table: MetricTable) -> dict[str, Any] | None:
    """Reward, each reward component and completion length (TRL: rewards/<fn>/mean; verl: critic/score)."""
    keys = table.metrics
    components = {
        k.split("/")[1]: keys[k].last[1] for k in keys if k.startswith("rewards/") and k.endswith("/mean")
    }
    reward_key = next((k for k in ("reward", "reward_mean", "critic/score/mean", "critic/rewards/mean") if k in keys),
                      None)
    length_key = next((k for k in ("completions/mean_length", "response_length/mean") if k in keys), None)
    if reward_key is None and not components:
        return None
    return {
        "reward": keys[reward_key].last[1] if reward_key else None,
        "reward_key": reward_key,
        "components": components,
        "completion_length": keys[length_key].last[1] if length_key else None,
        "clipped_ratio": keys["completions/clipped_ratio"].last[1] if "completions/clipped_ratio" in keys else None,
    }


def traceback_for(why: dict[str, Any] | None, tracebacks: list[dict[str, Any]]) -> str | None:
    """The traceback behind the root cause (same rank and exception), else the first non-launcher one."""
    if not tracebacks:
        return None
    if why is not None and why.get("exception"):
        for entry in tracebacks:
            if entry.get("rank") == why.get("rank") and why["exception"] in entry["text"][-2000:]:
                return str(entry["text"])
    if why is None or why["kind"] in ("exception", "cuda_oom", "nccl", "nccl_timeout", "exit_code"):
        real = [t for t in tracebacks if "ChildFailedError" not in t["text"][-300:]]
        return str((real or tracebacks)[0]["text"])
    return None


def curve_keys(table: MetricTable, limit: int = 12) -> list[str]:
    """Metrics worth a curve, by group (losses, rewards, completions, lr, throughput...), skipping epoch/time."""
    keys = [k for k in table.metrics if k not in ("epoch", "time") and table.metrics[k].count > 1]
    keys.sort(key=group_rank)
    return keys[:limit]
