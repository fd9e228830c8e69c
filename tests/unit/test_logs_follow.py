"""Following logs: appends, partial lines, truncation, rotation, per-rank files, the end of the job.

The writer is driven through follow()'s ``sleep`` hook: each time the follower finds nothing new it
"sleeps", and the next scripted change to the file happens then. No threads, no timing.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path

from gputrain.logs.follow import LineFilter, follow, last_lines


def scripted(actions: list[Callable[[], None]]) -> tuple[Callable[[float], None], Callable[[], bool]]:
    pending = list(actions)

    def sleep(_: float) -> None:
        if pending:
            pending.pop(0)()

    return sleep, lambda: not pending


def append(path: Path, data: bytes) -> Callable[[], None]:
    def act() -> None:
        with path.open("ab") as fh:
            fh.write(data)

    return act


def test_follow_survives_partial_lines_truncation_and_rotation(tmp_path: Path) -> None:
    log = tmp_path / "training_output.log"
    log.write_bytes(b"old 1\nold 2\n")

    def truncate() -> None:
        with log.open("r+b") as fh:
            fh.truncate(0)
            fh.write(b"after truncate\n")

    def rotate() -> None:
        append(log, b"last of rotated\n")()
        os.rename(log, tmp_path / "training_output.log.1")
        log.write_bytes(b"new file\n")

    sleep, finished = scripted([
        append(log, b"step 1\npart"),
        append(log, b"ial\n"),
        truncate,
        rotate,
        append(log, b"\xff\xfe binary \x00\nno newline at the end"),
    ])
    out: list[str] = []
    count = follow([log], out.append, finished, initial_lines=1, poll_s=0, sleep=sleep)
    assert out == [
        "old 2",
        "step 1",
        "partial",
        "after truncate",
        "last of rotated",
        "new file",
        "\ufffd\ufffd binary \\x00",
        "no newline at the end",
    ]
    assert count == len(out)


def test_follow_waits_for_a_file_that_does_not_exist_yet(tmp_path: Path) -> None:
    log = tmp_path / "later.log"
    sleep, finished = scripted([lambda: None, lambda: log.write_text("hello\n")])
    out: list[str] = []
    follow([log], out.append, finished, poll_s=0, sleep=sleep)
    assert out == ["hello"]


def test_follow_several_rank_files_with_rank_and_grep_filters(tmp_path: Path) -> None:
    r0, r1 = tmp_path / "rank0.log", tmp_path / "rank1.log"
    r0.write_text("loss 1\n")
    r1.write_text("loss 2\nreward 3\n")
    sleep, finished = scripted([append(r1, b"reward 4\n"), append(r0, b"reward 5\n")])
    out: list[str] = []
    only = LineFilter(rank=1, grep=re.compile("reward"))
    follow([r0, r1], out.append, finished, line_filter=only, poll_s=0, sleep=sleep)
    assert out == ["[rank1]: reward 3", "[rank1]: reward 4"]


def test_prefixed_lines_filtered_by_rank(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    log.write_text("[rank0]: a\n[rank1]: b\nplain\n[rank1]: c\n")
    out: list[str] = []
    follow([log], out.append, lambda: True, line_filter=LineFilter(rank=1), initial_lines=10, poll_s=0)
    assert out == ["[rank1]: b", "plain", "[rank1]: c"]


def test_overlong_line_is_cut_once(tmp_path: Path) -> None:
    log = tmp_path / "big.log"
    log.write_bytes(b"start\n")
    sleep, finished = scripted([append(log, b"x" * (3 << 20) + b"\nafter\n")])
    out: list[str] = []
    follow([log], out.append, finished, initial_lines=1, poll_s=0, sleep=sleep)
    assert out[0] == "start" and out[-1] == "after" and len(out) == 3
    assert out[1].endswith("(line cut)") and len(out[1]) < 70_000


def test_last_lines_reads_backwards(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    log.write_bytes(b"".join(b"line %d\n" % i for i in range(100_000)))
    with log.open("rb") as fh:
        assert last_lines(fh, 3) == [b"line 99997", b"line 99998", b"line 99999"]
        assert fh.tell() == log.stat().st_size
