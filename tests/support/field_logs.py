"""The summary of a log that is a few lines, written as a bare file and read the way ``gputrain logs FILE``
reads one: the helper the field-log mechanism tests share."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gputrain.logs.summarize import summarize


def summary_of_text(text: str, tmp_path: Path) -> dict[str, Any]:
    log = tmp_path / "x.log"
    log.write_text(text + "\n")
    return summarize(log, write=False)
