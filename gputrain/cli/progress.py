"""Progress for long phases (#31): a rich spinner with the elapsed time on stderr, only when stderr is a terminal.

Two sources. ``gputrain run`` reads the phase lines a training prints (``gputrain.contract.phases``: the
training's output is a pipe, so it cannot draw progress itself) and shows the running one; ``prepare`` shows
the file it is fetching. When stderr is not a terminal nothing is drawn: the plain lines stay as they are,
so logs and pipes hold no escape sequences. rich is imported only when something is drawn.

    gputrain run gnn_coloring --gpu cpu --gpus 2     # "⠋ ONNX export and onnxruntime check 0:00:12"
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from typing import IO, Any

from gputrain.cli.output import color_allowed, is_terminal
from gputrain.contract import phases


def shown() -> bool:
    """Progress is drawn only on a terminal (and not for ``TERM=dumb``)."""
    import os

    return is_terminal(sys.stderr) and os.environ.get("TERM") != "dumb"


class _Spinner:
    """One transient rich Progress on stderr: a spinner, a description and the elapsed time."""

    def __init__(self) -> None:
        from rich.console import Console
        from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        console = Console(file=sys.stderr, no_color=not color_allowed(), highlight=False)
        self.progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                                 console=console, transient=True, redirect_stdout=False, redirect_stderr=False)
        self.task: Any = None

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """The spinner off while a line is printed (stdout may be the same terminal), then back below it."""
        if self.task is None:
            yield
            return
        self.progress.stop()
        try:
            yield
        finally:
            self.progress.start()

    def show(self, description: str) -> None:
        if self.task is not None:
            self.progress.remove_task(self.task)
        else:
            self.progress.start()
        self.task = self.progress.add_task(description, total=None)

    def hide(self) -> None:
        if self.task is not None:
            self.progress.remove_task(self.task)
            self.task = None
            self.progress.stop()


class PhaseEcho:
    """A stream for the job's output that shows the phase the job is in while it runs.

    Lines go to ``sys.stdout`` as it is at write time (``--json`` swaps it for stderr), never through rich's
    console (stderr): the spinner is taken down while a line is printed and drawn again below it."""

    def __init__(self) -> None:
        self.spinner = _Spinner()
        self.buffer = ""

    def write(self, text: str) -> int:
        self.buffer += text
        *lines, self.buffer = self.buffer.split("\n")
        for line in lines:
            with self.spinner.paused():
                sys.stdout.write(line + "\n")
                sys.stdout.flush()
            event = phases.parse(line)
            if event is not None and event.seconds is None:
                self.spinner.show(event.name)
            elif event is not None:
                self.spinner.hide()
        return len(text)

    def flush(self) -> None:
        sys.stdout.flush()

    def close(self) -> None:
        if self.buffer:
            sys.stdout.write(self.buffer)
            self.buffer = ""
        self.spinner.hide()


@contextlib.contextmanager
def job_echo(stream: IO[str]) -> Iterator[IO[str]]:
    """``stream`` itself where nothing is drawn, else a :class:`PhaseEcho` (its spinner gone at the end)."""
    if not shown():
        yield stream
        return
    echo = PhaseEcho()
    try:
        yield echo  # type: ignore[misc]
    finally:
        echo.close()


@contextlib.contextmanager
def activity() -> Iterator[Callable[[str], None]]:
    """A ``say(message)`` for a command's own long work (``prepare``'s downloads): each message is printed on
    stderr as before and, on a terminal, also shown with a spinner until the next one or the end."""
    if not shown():
        yield lambda message: print(message, file=sys.stderr, flush=True)
        return
    spinner = _Spinner()

    def say(message: str) -> None:
        with spinner.paused():
            print(message, file=sys.stderr, flush=True)
        spinner.show(message.strip())

    try:
        yield say
    finally:
        spinner.hide()
