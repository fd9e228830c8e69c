"""One exit-code rule for every error type, and the "did you mean" helper the raise sites share."""

from __future__ import annotations

import pytest

from gputrain import errors
from gputrain.errors import (
    ClusterError,
    ClusterProfileError,
    GputrainError,
    RegistryError,
    UnknownJobError,
    UserError,
    did_you_mean,
    unknown_name,
)


def _all_error_types() -> list[type[GputrainError]]:
    found: list[type[GputrainError]] = []
    todo: list[type[GputrainError]] = [GputrainError]
    while todo:
        cls = todo.pop()
        found.append(cls)
        todo += cls.__subclasses__()
    return found


def test_every_error_is_a_user_error_exiting_2_or_a_world_failure_exiting_1() -> None:
    import gputrain.backends.runpod.api
    import gputrain.backends.runpod.up  # noqa: F401

    for cls in _all_error_types():
        expected = 2 if issubclass(cls, UserError) else (130 if cls.__name__ == "Interrupted" else 1)
        assert cls("x").exit_code == expected, cls


@pytest.mark.parametrize(("cls", "kind", "code"), [
    (errors.PlanError, "plan", 2), (errors.RecipeError, "recipe", 2), (ClusterProfileError, "cluster_profile", 2),
    (ClusterError, "cluster", 1), (UnknownJobError, "unknown_job", 2), (RegistryError, "registry", 1),
    (errors.JobFailedError, "job_failed", 1), (errors.RunPodUsageError, "run_pod_usage", 2),
])
def test_kind_and_code(cls: type[GputrainError], kind: str, code: int) -> None:
    assert (cls("m").kind, cls("m").exit_code) == (kind, code)


def test_specific_errors_are_still_caught_as_their_area() -> None:
    assert issubclass(ClusterProfileError, ClusterError) and issubclass(UnknownJobError, RegistryError)


@pytest.mark.parametrize(("typed", "known", "near"), [
    ("A100-40", ["A100-40GB", "A100-80GB", "H100-80GB"], ["A100-40GB"]),
    ("A100", ["A100-40GB", "A100-80GB", "H100-80GB"], ["A100-40GB", "A100-80GB"]),
    ("gnn_colouring", ["gnn_coloring", "grpo_code_mbpp", "selftest"], ["gnn_coloring"]),
    ("SUPERCLOUDD", ["supercloud", "testbed"], ["supercloud"]),
    ("zzz", ["supercloud", "testbed"], []),
])
def test_did_you_mean(typed: str, known: list[str], near: list[str]) -> None:
    assert did_you_mean(typed, known) == near


def test_unknown_name_suggests_or_lists_and_maps_aliases() -> None:
    assert unknown_name("GPU type", "h20", ["H200-141GB", "H100-80GB"], spellings={"H200": "H200-141GB"}) == \
        "unknown GPU type 'h20'; did you mean H200-141GB?"
    assert unknown_name("cluster", "nope", ["supercloud", "testbed"], hint="add your own") == \
        "unknown cluster 'nope'; known: supercloud, testbed (add your own)"
