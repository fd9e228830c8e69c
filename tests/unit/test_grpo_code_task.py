"""grpo_code's task: data selection, prompts, and the cached sandboxed reward (real sandbox)."""

from __future__ import annotations

import time

import pytest

pytest.importorskip("torch")

from gputrain.recipe.algorithms.grpo import GRPOAlgorithm
from gputrain.recipe.schema import DataSpec
from gputrain.train.grpo_code import build_code_task, load_code_tasks

DATA = DataSpec(source="generated", train_size=30, val_size=5)


def test_toy_data_split_and_humaneval_evaluation() -> None:
    train, held_out = load_code_tasks(DATA, seed=0)
    assert len(train) == 30 and len(held_out) == 5
    _, humaneval = load_code_tasks(DATA, seed=0, eval_dataset="humaneval")
    assert len(humaneval) == 164 and humaneval[0]["task_id"].startswith("HumanEval/")


def test_reward_scores_gold_1_empty_0_and_caches_repeats() -> None:
    task = build_code_task(DATA, GRPOAlgorithm(sandbox_workers=2), seed=0, world_size=2)
    assert task.reward_names == ["code_pass_rate"]
    rows = list(task.train_rows[:2])
    gold = [r["task"]["reference"][len(r["prompt"]) :] for r in rows]
    completions = [gold[0], "", gold[1], gold[0]]
    batch = [rows[0], rows[0], rows[1], rows[0]]
    first = task.score(completions, batch)
    assert first == [[1.0], [0.0], [1.0], [1.0]]
    assert task.score(completions, batch) == first  # served from the cache, same answer
    assert task.score([gold[1]], [rows[0]])[0][0] < 1.0  # the cache is keyed by task, not by text alone
    assert task.evaluate is not None
    result = task.evaluate([gold[0], "x x x"], [rows[0], rows[1]])
    assert result == {"pass_rate": 0.5, "pass_at_1": 0.5}
    assert any("def f(x)" in text for text in task.corpus)


def test_timed_out_program_is_not_cached_and_scores_when_run_again() -> None:
    """A timeout may be the machine's fault (overloaded), not the program's: the same (completion, task)
    must run again next time instead of keeping 0 for the rest of the training."""
    task = build_code_task(DATA, GRPOAlgorithm(sandbox_workers=1, sandbox_timeout_s=0.5))
    row = task.train_rows[0]
    gold = row["task"]["reference"][len(row["prompt"]) :]
    slow_until = time.time() + 2.0  # slow (past the 0.5 s limit) on the first call only, like a busy machine
    # The prompt ends inside ``return x+``: the continuation sleeps, then gives the right constant.
    sleep = f"__import__('time').sleep(max(0.0, {slow_until!r} - __import__('time').time()))"
    completion = f"({sleep} or {gold.strip()})\n"
    assert task.score([completion], [row]) == [[0.0]]
    time.sleep(max(0.0, slow_until - time.time()))
    assert task.score([completion], [row]) == [[1.0]]


def test_the_trainer_refuses_to_start_without_a_strong_sandbox(monkeypatch: pytest.MonkeyPatch) -> None:
    from gputrain.errors import SandboxError
    from gputrain.train.code_reward.reward import get_pool
    from gputrain.train.sandbox import choose_isolation

    monkeypatch.setenv("GPUTRAIN_SANDBOX_DISABLE", "namespaces,userns,landlock")
    monkeypatch.delenv("GPUTRAIN_SANDBOX_ALLOW_WEAK", raising=False)
    choose_isolation.cache_clear()
    get_pool.cache_clear()
    try:
        with pytest.raises(SandboxError, match="GPUTRAIN_SANDBOX_ALLOW_WEAK=1"):
            build_code_task(DATA, GRPOAlgorithm(sandbox_workers=2), seed=0, world_size=2)
    finally:
        monkeypatch.delenv("GPUTRAIN_SANDBOX_DISABLE")
        choose_isolation.cache_clear()
        get_pool.cache_clear()
    task = build_code_task(DATA, GRPOAlgorithm(sandbox_workers=2), seed=0, world_size=2)
    assert task.report["sandbox"]["strong"] is True
