"""Issue #25's attacks on the code sandbox, at every level this machine can run, as root and as uid 65534.

One trainer process per level (``sandbox_attacker.py``) scores every attack through the real reward path
and reports; each test below checks one attack class on that report. A program "wins" when it scores
above 0, changes the trainer, kills the batch or holds the trainer past its budget; a correct program
must still score 1.0 after every attack. Levels:

- ``root-namespaces``: the trainer is root (mount/PID/net/IPC namespaces, a dedicated uid, seccomp);
- ``root-landlock``: root with namespaces switched off (Landlock + seccomp + a dedicated uid);
- ``nobody-userns``: uid 65534 with unprivileged user namespaces;
- ``nobody-landlock``: uid 65534 with user namespaces switched off (Landlock + seccomp, same uid).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.security.sandbox_levels import LEVELS, Level, run_level

pytestmark = [pytest.mark.integration, pytest.mark.slow]

WALL = 3.0  # sandbox_attacker.LIMITS.wall_seconds


_REPORTS: dict[str, dict[str, Any]] = {}


@pytest.fixture(params=LEVELS, ids=[lv.name for lv in LEVELS])
def report(request: pytest.FixtureRequest, portable_packages: Path) -> dict[str, Any]:
    level: Level = request.param
    if level.name not in _REPORTS:
        _REPORTS[level.name] = run_level(level, portable_packages, "attacks")
    return _REPORTS[level.name]


def _attack(report: dict[str, Any], name: str) -> dict[str, Any]:
    entry = report["attacks"][name]
    assert "aborted" not in entry, f"{name} aborted the scoring: {entry}"
    return dict(entry)


def test_forged_replies_and_a_patched_serializer_score_nothing(report: dict[str, Any]) -> None:
    for name in ("forge_gone_passed", "forge_verdict_reply", "patched_serializer", "stale_replies_queued_ahead"):
        entry = _attack(report, name)
        assert entry["reward"] == 0.0, (name, entry)


def test_a_program_cannot_change_another_process(report: dict[str, Any]) -> None:
    entry = _attack(report, "change_other_processes")
    assert entry["reward"] == 0.0, entry
    assert report["trainer_after"] == report["trainer_before"]


def test_a_fake_setup_error_costs_only_its_own_program(report: dict[str, Any]) -> None:
    for name in ("setup_error_at_load", "setup_error_in_call", "exit_note_in_call"):
        entry = _attack(report, name)
        assert entry["reward"] == 0.0, (name, entry)
        assert entry["good_in_batch"] == 1.0, (name, entry)


def test_a_program_that_stops_reading_cannot_hold_the_trainer(report: dict[str, Any]) -> None:
    entry = _attack(report, "stops_reading_its_pipe")
    assert entry["statuses"][1] == "timed_out", entry
    # A bound, not a benchmark: before, the trainer sat in the write until the program's 30 s sleep ended.
    assert entry["seconds"] < WALL + 10, entry


def test_a_poisoned_dataset_row_cannot_patch_the_next_programs_judge(report: dict[str, Any]) -> None:
    entry = _attack(report, "poisoned_row_patches_the_judge")
    assert entry["reward"] == 0.0, entry


def test_installed_packages_are_not_readable(report: dict[str, Any]) -> None:
    entry = _attack(report, "read_site_packages")
    assert entry["reward"] == 0.0, entry


def test_the_temp_folder_has_the_configured_size(report: dict[str, Any]) -> None:
    entry = _attack(report, "fill_the_temp_folder")
    assert entry["reward"] == 0.0, entry
    assert entry["good_after"] == 1.0, entry


def test_a_spent_wall_budget_times_out_the_remaining_tests_at_once(report: dict[str, Any]) -> None:
    entry = _attack(report, "wall_budget_many_tests")
    assert entry["statuses"][-1] == "timed_out", entry
    # A bound, not a benchmark: before, every remaining test started a judge (at least 1 s allowed each).
    assert entry["seconds"] < WALL + 2, entry


def test_a_correct_program_using_the_stdlib_scores_one(report: dict[str, Any]) -> None:
    assert report["good_last"] == 1.0
