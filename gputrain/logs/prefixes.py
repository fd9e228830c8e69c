"""What launchers, loggers and log viewers put in front of a line, taken off so the line reads as it was written.

``[default1]:[rank1]:`` (torchrun ``--tee``, torch), srun ``--label``'s ``0: ``, ``stderr: ``, Ray's and vLLM's
``(APIServer pid=1)``, glog (``E1126 05:59:23.239000 11494 api.py:1002]``), c10d's ``[E321 02:07:08.4 x.cpp:607]``,
vLLM's ``ERROR 05-12 01:48:42 [core.py:398]`` (``engine.py:366]`` before 0.7), docker compose's
``vllm-1  | ``, Python logging's ``ERROR:name:``, timestamps, mmengine's
``10/30 22:18:02 - mmengine - INFO -`` and a viewer's line number ``[80746]``, in any order and nesting.
"""

from __future__ import annotations

import re

_PREFIXES = [re.compile(p) for p in (
    r"^\[(?:[A-Za-z_]*?)(?P<rank>\d+)\]:\s?",  # [rank3]: [default0]: [3]:
    r"^\[\d+\]\s+(?=\S)",  # a viewer's line number: [80746]
    r"^(?P<rank>\d{1,4}): ",  # srun --label
    r"^std(?:err|out):\s?",
    r"^\(\w+(?: pid=\d+)?(?:, ip=[\d.]+)?\)\s*",  # Ray/vLLM: (APIServer pid=1), (TaskRunner pid=4237, ip=10.0.0.1)
    r"^[EWIFD]\d{4} \d\d:\d\d:\d\d\.\d+\s+\d+\s+\S+:\d+\]\s?",  # glog (torch elastic, c10d)
    r"^\[[EWIF][\d ]*[^\]]*?\.(?:cpp|cc|h|py):\d+\]\s?",  # [E ProcessGroupNCCL.cpp:915] [E321 02:07:08.4 x.cpp:607]
    # vLLM: "ERROR 05-12 01:48:42 [core.py:398]", before 0.7 "ERROR 11-18 18:07:28 engine.py:366]"
    r"^(?:ERROR|WARNING|INFO|DEBUG|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? (?:\[[^\]]*\]|\S+:\d+\])\s?",
    r"^[\w.-]+[-_]\d+\s+\|\s",  # docker compose's service column: "vllm-1  | ", "trainer_1 | "
    r"^(?:ERROR|WARNING|CRITICAL):[\w.]+:",  # Python logging's default format
    # timestamps, then a level, or a logger name where it is bracketed or followed by " - " (another bare word
    # is the message: "Signal 9 (SIGKILL) received by PID 7", "RuntimeError: x")
    r"^\[?\d{4}-\d\d-\d\d[ T][\d:.,]+\]?\s*(?:-\s*)?"
    r"(?:\[(?![A-Za-z_]*\d+\]:)\w+\]\s*-?\s*|\w+\s+-\s*|(?:CRITICAL|ERROR|WARNING|WARN|INFO|DEBUG|FATAL)\b:?\s*)?"
    r"(?:\[(?![A-Za-z_]*\d+\]:)[^\]]*\]\s*)*",  # ... but not a rank prefix after it: "2024-11-20 14:37:16 [rank3]: x"
    r"^\d\d/\d\d \d\d:\d\d:\d\d - \S+ - \w+ - ",  # mmengine
)]
_ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def normalize(line: str) -> tuple[int | None, str]:
    """``[default1]:[rank1]: ERROR 05-12 … [x.py:7] text`` → (1, "text"): every decoration off the front."""
    if "\x1b" in line:
        line = _ANSI_RE.sub("", line)
    rank: int | None = None
    for _ in range(6):
        for pattern in _PREFIXES:
            match = pattern.match(line)
            if match and match.end():
                if "rank" in pattern.groupindex and match.group("rank") is not None and rank is None:
                    rank = int(match.group("rank"))
                line = line[match.end():]
                break
        else:
            break
    return rank, line.rstrip()
