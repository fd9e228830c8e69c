"""The lines a training prints around a long phase, and how the CLI reads them back (#31: long phases are silent).

A training runs under torchrun with its output in a pipe, so it cannot draw progress itself. Instead rank 0
prints one plain line when a long phase starts and one when it ends (they stay in ``training_output.log``,
where they say where the time went); ``gputrain run`` reads them from the pipe and, when stderr is a terminal,
shows the running phase with a spinner and its elapsed time (``gputrain.cli.progress``).

    [phase] ONNX export ...
    [phase] ONNX export done in 12.3 s
"""

from __future__ import annotations

import re
from typing import NamedTuple

PREFIX = "[phase] "
_START = " ..."
_END_RE = re.compile(r" done in (\d+(?:\.\d+)?) s$")


class PhaseEvent(NamedTuple):
    name: str
    seconds: float | None
    """None for the start of the phase, its duration at its end."""


def start_line(name: str) -> str:
    return f"{PREFIX}{name}{_START}"


def end_line(name: str, seconds: float) -> str:
    return f"{PREFIX}{name} done in {seconds:.1f} s"


def parse(line: str) -> PhaseEvent | None:
    """The phase event a log line announces (``[rank0]:`` prefixes allowed), else None."""
    at = line.find(PREFIX)
    if at < 0 or (at and not line[:at].rstrip().endswith(":")):
        return None
    body = line[at + len(PREFIX):].rstrip("\r\n")
    if body.endswith(_START):
        return PhaseEvent(body.removesuffix(_START), None)
    done = _END_RE.search(body)
    if done:
        return PhaseEvent(body[: done.start()], float(done.group(1)))
    return None
