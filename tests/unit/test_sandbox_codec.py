"""The plain-data codec between judge and program, and the isolation settings (no subprocess)."""

from __future__ import annotations

import math
import os
import sys

import pytest

from gputrain.train.sandbox.config import NEVER_COVER, blocked_ancestor, default_hidden_paths, minimal_env, mount_plan
from gputrain.train.sandbox.runner import decode, encode


def no_opaque(value: object) -> object:
    raise TypeError(type(value).__name__)


def no_refs(tag: str, body: object) -> object:
    raise ValueError(tag)


@pytest.mark.parametrize("value", [
    None, True, 0, -(10 ** 40), 2.5, "naïve\n", [1, [2, (3,)]], (), {1: "a", (2, 3): [None]},
    {1, 2}, frozenset({"x"}), b"\x00\xff", 3 - 4j, {"nested": {"deep": [{"s": {1}}]}},
])
def test_plain_data_round_trips_with_exact_types(value: object) -> None:
    back = decode(encode(value, no_opaque), no_refs)
    assert back == value
    assert type(back) is type(value)


def test_bool_stays_bool_and_nan_survives() -> None:
    assert decode(encode([True, 1], no_opaque), no_refs) == [True, 1]
    assert [type(v) for v in decode(encode([True, 1], no_opaque), no_refs)] == [bool, int]
    assert math.isnan(decode(encode(float("nan"), no_opaque), no_refs))


def test_non_data_goes_through_the_opaque_hook() -> None:
    class Thing:
        pass

    assert encode([Thing()], lambda v: {"h": [7, type(v).__name__]}) == {"l": [{"h": [7, "Thing"]}]}
    with pytest.raises(TypeError):
        encode(object(), no_opaque)


@pytest.mark.parametrize("bad", [{"zz": 1}, {"l": 5}, {"d": [[1]]}, [1, 2], {"l": [], "t": []}])
def test_decoder_rejects_malformed_replies(bad: object) -> None:
    with pytest.raises(ValueError):
        decode(bad, no_refs)


def test_decoder_limits_nesting() -> None:
    deep: object = 1
    for _ in range(200):
        deep = {"l": [deep]}
    with pytest.raises(ValueError, match="deeply"):
        decode(deep, no_refs)


def test_minimal_env_carries_nothing_from_the_parent(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_TOKEN", "secret-value")
    env = minimal_env("/tmp/w")
    assert "HF_TOKEN" not in env
    assert "secret-value" not in repr(env)
    assert set(env) <= {"PATH", "HOME", "TMPDIR", "LANG", "PYTHONDONTWRITEBYTECODE", "PYTHONHASHSEED"}


def test_hidden_paths_never_include_system_folders() -> None:
    hidden = default_hidden_paths()
    assert not set(hidden) & NEVER_COVER
    assert "/tmp" in hidden
    assert os.path.expanduser("~") in hidden or os.path.expanduser("~") in NEVER_COVER


def test_mount_plan_reexposes_the_interpreter() -> None:
    root = os.path.realpath(sys.base_prefix)
    ancestor = os.path.dirname(root)
    plan = mount_plan((ancestor, "/", "/usr", "/tmp"))
    assert ancestor in plan["cover"]
    assert plan["keep"] == [root]
    assert "/" not in plan["cover"] + plan["hide"]
    assert "/usr" not in plan["cover"] + plan["hide"]
    assert "/tmp" in plan["hide"]


def test_blocked_ancestor_finds_private_home(tmp_path: object) -> None:
    private = os.path.join(str(tmp_path), "private")
    os.makedirs(os.path.join(private, "inner"))
    os.chmod(private, 0o700)
    assert blocked_ancestor(os.path.join(private, "inner")) in (private, blocked_ancestor(str(tmp_path)))
