"""``runpod up --retry N``: the job's text summary shows each attempt (#30) — its number, its pod, how it ended
and the checkpoint it resumed from — also when the summary is rebuilt later (``gputrain logs JOB --summary``
reads the job folder's ``runpod.json``, which the run writes with every attempt). The end-to-end run on the
RunPod fake is ``test_retry_relaunches_an_evicted_run_from_its_newest_salvaged_checkpoint`` in
tests/integration/test_runpod_faults.py.
"""

from __future__ import annotations

import json
from pathlib import Path

from gputrain.logs.report import render_text
from gputrain.logs.summarize import summarize

ATTEMPTS = [
    {"attempt": 1, "pod_id": "pod-a1", "state": "LOST",
     "reason": "pod pod-a1 went to EXITED while the connection was down (taken away by its host); salvaged 2 files",
     "resumed_from": None, "salvaged": ["checkpoints/step_00000024"], "cost_usd": 0.12},
    {"attempt": 2, "pod_id": "pod-b2", "state": "COMPLETED", "reason": "the training finished (exit 0)",
     "resumed_from": "step_00000024", "salvaged": [], "cost_usd": 0.3},
]


def _job(tmp_path: Path, attempts: list[dict[str, object]]) -> Path:
    job = tmp_path / "selftest_pod_x"
    job.mkdir()
    (job / "training_output.log").write_text("step 24/60 | loss 2.0\nresumed from step_00000024\n"
                                             "step 60/60 | loss 1.0\n")
    (job / "runpod.json").write_text(json.dumps({"pod_name": "x", "state": "COMPLETED", "attempts": attempts}))
    return job


def test_each_attempt_is_a_line_of_the_text_summary(tmp_path: Path) -> None:
    text = render_text(summarize(_job(tmp_path, ATTEMPTS), final=True, exit_code=0, write=False))
    rows = [line for line in text.splitlines() if line.startswith("attempt")]
    assert len(rows) == 2, text
    assert "1: pod pod-a1 LOST (pod pod-a1 went to EXITED" in rows[0] and "from the start" in rows[0]
    assert "salvaged 2 files" not in rows[0]  # the first clause says how it ended; the rest is in summary.json
    assert "2: pod pod-b2 COMPLETED" in rows[1] and "from checkpoint step_00000024" in rows[1] and "$0.30" in rows[1]


def test_a_run_without_retries_and_a_hostile_record_show_no_raw_text(tmp_path: Path) -> None:
    plain = render_text(summarize(_job(tmp_path, []), write=False))
    assert "attempt" not in plain
    hostile = [{"attempt": 1, "pod_id": "p\x1b[2J", "state": "LOST", "reason": "gone\x07", "cost_usd": "x"}, "junk"]
    other = tmp_path / "other"
    other.mkdir()
    text = render_text(summarize(_job(other, hostile), write=False))  # type: ignore[arg-type]
    (row,) = [line for line in text.splitlines() if line.startswith("attempt")]
    assert "\x1b" not in row and "\x07" not in row and "from the start" in row
