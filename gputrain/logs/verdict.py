"""The root cause among a log's fatal events, and the end state a log with no recorded end shows.

The order (:func:`choose`): a scheduler's verdict (a bare CANCELLED after a task failed is not one: that is Slurm
tearing the step down); an out-of-memory event (an exception first); the first worker exception (the rank the
launcher names, else the first rank that failed); an NCCL timeout; vLLM's engine death; the launcher's own account
(a rank killed by SIGKILL — likely the host's OOM killer — or its exit code); a consequence (another rank's echo),
when nothing else is there. Events the run went on after (``recovered``) come last.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from gputrain.logs.fatal import OOM_KINDS, Fatal, scan


def choose(events: list[Fatal], named_rank: int | None = None) -> Fatal | None:
    """The root cause among ``events`` (see the module docstring for the order)."""
    def first(candidates: list[Fatal]) -> Fatal | None:
        named = [e for e in candidates if named_rank is not None and e.rank == named_rank]
        return (named or candidates)[0] if candidates else None

    verdicts = [e for e in events if e.group == "verdict"]
    if verdicts and verdicts[0].kind == "cancelled" and any(
            e.line < verdicts[0].line and not e.recovered and e.group in ("worker", "launcher")
            and e.kind not in ("signal", "cancelled") and "Signal" not in (e.exception or "") for e in events):
        # A CANCELLED with no reason after a task failed is Slurm tearing the step down (srun's "_step_signal:
        # Terminating StepId"), not a user's cancel: the failure is the cause. A signal the launcher got before
        # Slurm's line (torchrun's SignalException from the same scancel) is no such failure.
        verdicts[0].group = "consequence"
        verdicts = verdicts[1:]
    if verdicts:
        return verdicts[0]
    live = [e for e in events if not e.recovered]
    return _choose(live, first) or _choose([e for e in events if e.recovered], first)


def _choose(events: list[Fatal], first: Callable[[list[Fatal]], Fatal | None]) -> Fatal | None:
    workers = [e for e in events if e.group == "worker"]
    for pick in (
        [e for e in workers if e.kind in OOM_KINDS and e.exception],
        [e for e in workers if e.kind in OOM_KINDS],
        [e for e in workers if e.kind not in ("nccl_timeout", "vllm_engine")],
        [e for e in workers if e.kind == "nccl_timeout"],
        [e for e in workers if e.kind == "vllm_engine"],
        [e for e in events if e.group == "launcher" and e.kind == "host_oom"],
        [e for e in events if e.group == "launcher"],
        [e for e in events if e.group == "consequence" and e.exception and "SIGTERM" not in e.headline],
        [e for e in events if e.group == "consequence"],
    ):
        found = first(pick)
        if found is not None:
            return found
    return None


def launcher_rank(events: list[Fatal]) -> int | None:
    """The rank the launcher says failed first (torchrun's box or its ``failed (exitcode…)`` line)."""
    for event in events:
        if event.group == "launcher" and event.rank is not None:
            return event.rank
    return None


#: A trainer's own word that training ended well: HF's ``train_runtime`` dict and ``***** train metrics *****``
#: block, Lightning's "`Trainer.fit` stopped", and the plain words trainers print ("Training completed",
#: "Reached max_steps (1635), stopping training", fairseq's "done training in 12.3 seconds", MLX's "Saved final
#: weights", DeepSpeed-Chat's "saving the final model"), Ultralytics' "100 epochs completed in 1.2 hours", verl's
#: "Final validation metrics", detectron2's "Total training time".
_DONE_RE = re.compile(r"'train_runtime'|\"train_runtime\"|`Trainer\.fit` stopped|\*{5} train metrics \*{5}|"
                      r"\b\d+ epochs completed in\b|Final validation metrics|Total training time:|"
                      r"\b(?:training (?:completed|complete|finished|is done)|(?:done|finished) training|"
                      r"reached max_steps|(?:saved|saving) (?:the )?final (?:model|weights|checkpoint|adapters?))\b",
                      re.IGNORECASE)


def infer_end(text: str) -> tuple[str, str] | None:
    """(state, the line that shows it) for a log with no recorded end, from the log's own evidence; None when
    it shows none (a run still going, or a log cut short): FAILED when the root event is the last word of the
    run (nothing trained after it), TIMEOUT/CANCELLED/PREEMPTED/NODE_FAIL when Slurm says so, COMPLETED when the
    trainer printed its end (:data:`_DONE_RE`) after any failure."""
    found = scan(text)
    root = choose(found, launcher_rank(found))
    if root is not None and root.group == "verdict":
        return root.state, root.evidence
    lines = text.splitlines()
    done = next((i for i in range(len(lines) - 1, -1, -1) if _DONE_RE.search(lines[i])), None)
    last_epoch = _last_epoch_finished(lines)
    if last_epoch is not None and (done is None or last_epoch > done):
        done = last_epoch
    if root is not None and not root.recovered and (done is None or root.line > done):
        return ("CANCELLED" if root.kind == "cancelled" else root.state), root.evidence or root.headline
    if done is not None:
        return "COMPLETED", lines[done].strip()[-300:]
    return None


_EPOCH_OF_RE = re.compile(r"\bEpoch (\d+)/(\d+)\b")
_EPOCH_SUMMARY_RE = re.compile(r"^\s*(\d+)/(\d+) (?:\[=+\]|-)")


def _last_epoch_finished(lines: list[str]) -> int | None:
    """The line where the last of N epochs finished, when the log's last "Epoch N/N" header (Keras) is followed
    by that epoch's summary: its progress bar at n/n with the metrics (``4451/4451 [====] - 3s - loss: 0.02``).
    A last epoch still under way (the bar short of n/n) or an earlier epoch is no end."""
    for index in range(len(lines) - 1, -1, -1):
        if "Epoch " not in lines[index]:
            continue
        header = _EPOCH_OF_RE.search(lines[index])
        if header is None:
            continue
        if header.group(1) != header.group(2):
            return None
        for later in range(index + 1, len(lines)):
            bar = _EPOCH_SUMMARY_RE.match(lines[later])
            if bar and bar.group(1) == bar.group(2) and "loss" in lines[later]:
                return later
        return None
    return None
