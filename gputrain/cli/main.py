"""The ``gputrain`` process: runs the Typer app and turns every error into one line and the right exit code.

A :class:`~gputrain.errors.GputrainError` prints ``error: <message>`` on stderr and exits with its code
(2 for a user error, 1 for a failure of the world; see :mod:`gputrain.errors`); a usage error from the
command line (a bad flag, a missing argument) exits 2 as click has it. With ``--json`` on the command line
the error is a JSON object on stdout instead, ``{"error": {"message", "kind", "exit_code"}}``, so a
program reading stdout always gets JSON. Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from gputrain.errors import USER_ERROR, WORLD_ERROR, GputrainError


def wants_json(args: Sequence[str]) -> bool:
    """``--json`` among the options (not after ``--``, where it would be a value)."""
    for arg in args:
        if arg == "--":
            return False
        if arg == "--json":
            return True
    return False


def report_error(message: str, kind: str, exit_code: int, *, as_json: bool) -> None:
    """Print one error: a JSON object on stdout with ``--json``, else ``error: ...`` on stderr."""
    if as_json:
        import json

        error = {"message": message, "kind": kind, "exit_code": exit_code}
        sys.stdout.write(json.dumps({"error": error}) + "\n")
        sys.stdout.flush()
        return
    one_line = " ".join(message.split())
    color = sys.stderr.isatty() and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"
    label = "\x1b[1;31merror:\x1b[0m" if color else "error:"
    print(f"{label} {one_line}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    as_json = wants_json(args)
    try:
        from gputrain.cli.app import app

        code = app(args=args, prog_name="gputrain", standalone_mode=False)
    except GputrainError as exc:
        report_error(exc.message, exc.kind, exc.exit_code, as_json=as_json)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)
    except Exception as exc:
        click_error = _click_error(exc)
        if click_error is None:
            raise
        _exit_click_error(click_error, as_json)
    sys.exit(code if isinstance(code, int) else 0)


def _click_error(exc: Exception) -> Exception | None:
    """``exc`` if it is click's (a usage error, an abort), else None. Typer vendors click from 0.26 on, so
    the classes are found by name along the MRO rather than imported from a private module."""
    names = {cls.__name__ for cls in type(exc).__mro__}
    return exc if names & {"ClickException", "Abort"} else None


def _exit_click_error(exc: Exception, as_json: bool) -> None:
    if type(exc).__name__ == "Abort" or not hasattr(exc, "format_message"):
        report_error("aborted", "aborted", WORLD_ERROR, as_json=as_json)
        sys.exit(WORLD_ERROR)
    exit_code = int(getattr(exc, "exit_code", USER_ERROR))
    if as_json and type(exc).__name__ != "NoArgsIsHelpError":
        report_error(exc.format_message(), "usage", exit_code, as_json=True)
    elif type(exc).__name__ == "NoArgsIsHelpError":
        exc.show()  # type: ignore[attr-defined]  # the help the user asked for by giving no arguments
    else:  # one line like every other error, with where to read more: not click's three-line usage block
        ctx = getattr(exc, "ctx", None)
        hint = f" (see '{ctx.command_path} -h')" if ctx is not None else ""
        report_error(exc.format_message() + hint, "usage", exit_code, as_json=False)
    sys.exit(exit_code)


if __name__ == "__main__":
    main()
