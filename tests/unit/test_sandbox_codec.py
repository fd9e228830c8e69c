"""The plain-data codec between judge and program, and the isolation settings (no subprocess)."""

from __future__ import annotations

import math
import os
import sys

import pytest

from gputrain.train.sandbox.codec import decode, encode
from gputrain.train.sandbox.config import blocked_ancestor, interpreter_root, minimal_env, read_only_paths


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


def test_read_only_allowlist_is_system_folders_and_the_interpreter_only() -> None:
    paths = read_only_paths()
    root = interpreter_root()
    assert any(root == p or root.startswith(p.rstrip("/") + "/") for p in paths)
    home = os.path.expanduser("~")
    for private in ("/", "/tmp", "/home", "/root", "/work", "/etc", home, os.getcwd()):
        assert private not in paths
    assert all(p.startswith(("/usr", "/bin", "/sbin", "/lib", "/etc/ld.so.cache", "/etc/localtime", root,
                             os.path.dirname(os.path.realpath(sys.executable)))) for p in paths)


def test_blocked_ancestor_finds_private_home(tmp_path: object) -> None:
    private = os.path.join(str(tmp_path), "private")
    os.makedirs(os.path.join(private, "inner"))
    os.chmod(private, 0o700)
    assert blocked_ancestor(os.path.join(private, "inner")) in (private, blocked_ancestor(str(tmp_path)))
