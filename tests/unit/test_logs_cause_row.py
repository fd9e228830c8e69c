"""The summary's ``cause`` row reads as facts (#30): the failing rank, never the rule's own classification
("group verdict", "group launcher") and never an empty "CUDA out of memory: " when only the rank is known."""

from __future__ import annotations

from pathlib import Path

from gputrain.logs.report import render_text
from gputrain.logs.summarize import summarize


def _cause_rows(tmp_path: Path, text: str) -> list[str]:
    log = tmp_path / "x.log"
    log.write_text(text)
    return [line for line in render_text(summarize(log, write=False)).splitlines() if line.startswith("cause")]


def test_a_rank_prefixed_oom_names_its_rank(tmp_path: Path) -> None:
    rows = _cause_rows(tmp_path, "[rank3]: Traceback (most recent call last):\n[rank3]:   File \"t.py\", line 3\n"
                                 "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 424.00 MiB\n")
    assert rows == ["cause       CUDA out of memory: rank 0"]


def test_the_rules_classification_is_not_shown(tmp_path: Path) -> None:
    rows = _cause_rows(tmp_path, "step 10/100 | loss 2.1\nslurmstepd: error: *** JOB 4242 ON n1 CANCELLED AT "
                                 "2026-11-20T10:00:00 DUE TO TIME LIMIT ***\n")
    assert not any("group" in row for row in rows), rows


def test_a_nan_metric_is_in_the_headline_when_nothing_failed(tmp_path: Path) -> None:
    log = tmp_path / "nan.log"
    log.write_text("{'loss': 1.2, 'grad_norm': nan, 'epoch': 0.1}\n{'loss': 1.1, 'grad_norm': nan, 'epoch': 0.2}\n")
    first = render_text(summarize(log, write=False)).splitlines()[0]
    assert first.startswith("nan.log  ") and "grad_norm went NaN" in first, first
