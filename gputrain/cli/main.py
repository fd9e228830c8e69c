"""The ``gputrain`` process: one-line errors around the Typer app, and the submit fast path.

Errors that carry a user-facing message (:class:`GputrainError`) are printed on one line with no
traceback. ``gputrain submit`` first tries :mod:`gputrain.cli.submit_cache`, which replays an identical
earlier submit's prepared job without importing Typer, pydantic or Jinja; that is why this module imports
only the standard library and the Typer app is loaded inside :func:`main`.
"""

from __future__ import annotations

import sys

from gputrain.errors import GputrainError


def main() -> None:
    try:
        if len(sys.argv) > 2 and sys.argv[1] == "submit":
            from gputrain.cli.submit_cache import submit_from_cache

            if submit_from_cache(sys.argv[2:]):
                return
        from gputrain.cli.app import app

        app()
    except GputrainError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)


if __name__ == "__main__":
    main()
