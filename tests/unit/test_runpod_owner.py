"""One owner per pod (the lock and the names) and the salvage's choice of checkpoint, without a pod."""

from __future__ import annotations

import pytest

from gputrain.backends.runpod.owner import PodLock, busy_error, new_run_id, run_pod_name
from gputrain.backends.runpod.salvage import newest_checkpoint
from gputrain.errors import UserError
from gputrain.home import UnsafeNameError


def test_each_run_gets_its_own_name():
    ids = {new_run_id() for _ in range(50)}
    assert len(ids) == 50
    assert run_pod_name("gputrain-gnn-b200x8-0123456789", "1a2b3c4d") == "gputrain-gnn-b200x8-0123456789-1a2b3c4d"


def test_a_held_name_cannot_be_taken_and_says_who_holds_it(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUTRAIN_HOME", str(tmp_path))
    first, second = PodLock("gputrain-x"), PodLock("gputrain-x")
    assert first.acquire("run1")
    assert not second.acquire("run2")
    holder = second.holder()
    assert holder is not None and holder["run_id"] == "run1"
    error = busy_error("gputrain-x", holder)
    assert isinstance(error, UserError) and "gputrain runpod attach gputrain-x" in error.message
    first.release()
    assert second.holder() is None and second.acquire("run2")
    second.release()


def test_a_lock_name_must_be_a_plain_name(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUTRAIN_HOME", str(tmp_path))
    with pytest.raises(UnsafeNameError):
        PodLock("../etc")


def test_newest_checkpoint_is_the_highest_complete_step_and_never_a_hostile_name():
    names = ["step_00000060", "step_00000084", ".tmp-step_00000096", ".old-step_00000072", "step_00000072",
             "step_1;rm -rf ~", "-rf", "step_00000099x"]
    assert newest_checkpoint(names) == "step_00000084"
    assert newest_checkpoint([".tmp-step_00000012"]) is None
