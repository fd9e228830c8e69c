"""#25.13 — live output of a local ``run`` and of ``runpod up`` passes through the one terminal filter.

The attack: the job (or the pod) prints an OSC 52 sequence (writes the user's clipboard), a title change, a
one-byte C1 CSI, a BEL. ``gputrain logs`` already showed them as escapes; the live echo passed them to the
terminal. Both now use :func:`gputrain.logs.follow.display_line`, so the same bytes look the same live and in
``logs``; the log file itself keeps the raw bytes.
"""

from __future__ import annotations

import io
from pathlib import Path

from gputrain.backends.local import LocalBackend
from gputrain.backends.runpod.session import echo_lines
from gputrain.logs.follow import display_line
from gputrain.registry.store import JobRegistry

ROOT = Path(__file__).resolve().parents[2]
HOSTILE = "step 1 \x1b]52;c;cm0gLXJmIH4=\x07 \x1b]0;owned\x07 \x9b2J \x1b[2J done"
UNSAFE = ("\x1b", "\x07", "\x9b")


def _assert_inert(text: str) -> None:
    for char in UNSAFE:
        assert char not in text, f"{char!r} reached the terminal: {text!r}"
    assert "\\x1b]52;c;cm0gLXJmIH4=" in text and "done" in text  # shown, not dropped


def test_local_run_echo_shows_escape_sequences_instead_of_sending_them(tmp_path: Path) -> None:
    from gputrain.planner import make_plan

    plan = make_plan(ROOT / "recipes" / "selftest.yaml", gpu="cpu", gpus_per_node=1, target="local")
    backend = LocalBackend(JobRegistry(tmp_path / "jobs.db"))
    sub = backend.prepare(plan, logs_dir=tmp_path / "logs")
    # the job: whatever launch.sh runs prints what it likes
    (sub.job_dir / "launch.sh").write_bytes(b"printf '" + HOSTILE.encode() + b"\\n'\nprintf 'tail\\n'\n")
    echo = io.StringIO()
    assert backend.run(sub, echo=echo) == 0
    shown = echo.getvalue()
    _assert_inert(shown)
    assert shown.splitlines()[0] == display_line(HOSTILE.encode())  # one filter: the same as `logs`
    assert shown.splitlines()[-1] == "tail"
    assert HOSTILE.encode() in (sub.job_dir / "training_output.log").read_bytes()  # the log keeps the bytes


def test_pod_output_echo_shows_escape_sequences_and_keeps_partial_lines() -> None:
    out = io.StringIO()
    data = HOSTILE.encode() + b"\nsecond \x1b[31mred\x1b[0m\npartial \x1b]0;"
    pending = echo_lines(data, out)
    assert pending == b"partial \x1b]0;"  # completed by the next chunk
    pending = echo_lines(pending + b"x\x07\n", out)
    assert pending == b""
    shown = out.getvalue()
    _assert_inert(shown)
    assert shown.splitlines() == [display_line(HOSTILE.encode()), display_line(b"second \x1b[31mred\x1b[0m"),
                                  display_line(b"partial \x1b]0;x\x07")]
