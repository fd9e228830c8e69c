"""Summaries of logs written by the real libraries (fixtures made by tests/fixtures/logs/generate.py).

Each committed fixture was produced by running the library (tiny model, CPU, a few steps); the header line
of each file names the versions and the command. The expectations below are read off the fixtures'
final lines by hand (the dicts the trainers printed, the bars, the tracebacks).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gputrain.logs.catalog import metric_info
from gputrain.logs.parse import parse_line, split_rank
from gputrain.logs.summarize import summarize

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "logs"


def run(name: str, exit_code: int = 0, **kwargs: object) -> dict:
    return summarize(FIXTURES / name, write=False, final=True, exit_code=exit_code, **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("fixture", "done", "planned", "last"),
    [
        # transformers 5: string values after tqdm \r bars; eval dicts; the train_runtime dict at the end
        ("hf5_trainer.log", 30, 30, {"loss": 3.175, "eval_loss": 3.16, "lr": 3.333e-05, "train_loss": 3.198}),
        # transformers 4.57: floats
        ("hf4_trainer.log", 30, 30, {"loss": 3.052, "eval_loss": 3.0859262943267822, "epoch": 0.94}),
        # torchrun --tee 3 / accelerate launch --tee 3: [default0]: prefixes, bars split into lines
        ("hf5_trainer_torchrun.log", 30, 30, {"loss": 3.15, "eval_loss": 3.151, "train_loss": 3.182}),
        ("hf5_trainer_accelerate.log", 30, 30, {"loss": 3.15, "eval_loss": 3.151, "train_loss": 3.182}),
        ("trl_grpo.log", 30, 30, {"reward": 1.25, "rewards/reward_has_cat/mean": 0.375,
                                  "completions/mean_length": 10.25, "loss": -0.08721}),
        ("trl_dpo.log", 20, 20, {"loss": 0.6533, "rewards/margins": 0.08136, "rewards/accuracies": 1.0}),
        ("trl_sft.log", 20, 20, {"loss": 3.148, "mean_token_accuracy": 0.1401}),
        ("lightning_tqdm.log", 30, None, {"train_loss": 0.053, "val_loss": 0.0262, "epoch": 2.0}),
        ("lightning_rich.log", 30, None, {"train_loss": 0.053, "val_loss": 0.026}),
        ("verl_console.log", 20, None, {"critic/score/mean": 0.8558050943826498, "response_length/mean": 300.0}),
        ("deepspeed.log", 20, None, {"loss": 11.0505}),
        ("source_metrics.log", 100, None, {"loss": 2.2, "eval_loss": 2.3, "mfu": 30.0, "tokens_per_s": 5678.0,
                                           "gpu_mem_gib": 31.25, "vllm/gen_tokens_per_s": 2048.7}),
    ],
)
def test_real_library_logs_give_last_values_and_steps(fixture: str, done: int, planned: int | None,
                                                      last: dict[str, float]) -> None:
    s = run(fixture)
    assert s["state"] == "COMPLETED" and s["cause"] is None
    assert s["steps"] == {"done": done, "planned": planned}
    for key, value in last.items():
        assert s["metrics"][key]["last"] == pytest.approx(value), key


def test_hf_dicts_are_placed_at_their_training_step() -> None:
    """HF dicts carry an epoch; the step comes from the bar: step 10's eval shares the x of step 10's loss."""
    for fixture in ("hf5_trainer.log", "hf5_trainer_torchrun.log"):
        s = run(fixture)
        assert [x for x, _ in s["series"]["eval_loss"]] == [10.0, 20.0, 30.0], fixture
        assert [x for x, _ in s["series"]["loss"]][:2] == [5.0, 10.0], fixture


def test_torchrun_crash_headline_is_the_workers_exception_and_rank() -> None:
    s = run("torchrun_crash.log", exit_code=1)
    assert (s["state"], s["cause"]) == ("FAILED", "exception")
    assert s["failure"] == "RuntimeError: simulated failure: loss became NaN at step 25 (rank 1, host localhost)"
    cause = s["root_cause"]
    assert (cause["exception"], cause["rank"], cause["host"]) == ("RuntimeError", 1, "localhost")
    assert "remedy" in cause and cause["remedy"] is None  # the failure doctor's slot
    assert s["traceback"].splitlines()[-1] == "RuntimeError: simulated failure: loss became NaN at step 25"
    assert "ChildFailedError" not in s["failure"]
    assert s["metrics"]["loss"]["last"] == 0.0917 and s["steps"]["done"] == 25


def test_cuda_oom_cause_carries_allocation_and_capacity() -> None:
    s = run("cuda_oom.log", exit_code=1)
    cause = s["root_cause"]
    assert cause["kind"] == "cuda_oom" and cause["rank"] == 1
    assert cause["details"] == {"tried_gib": 2.0, "gpu": 1, "capacity_gib": 79.15, "free_gib": 1.23,
                                "in_use_gib": 77.9, "allocated_gib": 75.1, "reserved_unallocated_gib": 1.3}
    # rank 0's watchdog timeout came after, as a consequence: the OOM stays the headline
    assert s["failure"].startswith("CUDA out of memory: tried to allocate 2.00 GiB on GPU 1 (79.15 GiB total")


def test_nccl_watchdog_timeout_names_rank_collective_and_host() -> None:
    s = run("nccl_timeout.log", exit_code=134)
    cause = s["root_cause"]
    assert cause["kind"] == "nccl_timeout" and (cause["rank"], cause["host"]) == (3, "n2")
    assert cause["details"]["collective"] == "ALLGATHER" and cause["details"]["timeout_ms"] == 600000
    assert s["failure"] == "NCCL ALLGATHER (SeqNum 8123) timed out after 600 s (rank 3, host n2)"


@pytest.mark.parametrize(
    ("state", "kind"),
    [("TIMEOUT", "time_limit"), ("NODE_FAIL", "node_fail"), ("PREEMPTED", "preempted"), ("OUT_OF_MEMORY", "host_oom")],
)
def test_scheduler_state_is_the_cause_when_given(state: str, kind: str) -> None:
    s = run("torchrun_crash.log", exit_code=1, state=state)
    assert s["state"] == state
    assert s["root_cause"]["kind"] == kind and s["root_cause"]["source"] == "scheduler"


def test_killed_exit_137_is_host_oom() -> None:
    s = run("deepspeed.log", exit_code=137)
    assert s["root_cause"]["kind"] == "host_oom" and s["root_cause"]["details"]["oom_seen_in_log"] is False
    assert s["failure"] == "most likely killed by the host's OOM killer (SIGKILL, exit 137)"


def test_metric_catalog_directions_units_and_groups() -> None:
    assert metric_info("loss").better == "lower" and metric_info("eval_loss").better == "lower"
    assert metric_info("reward").better == "higher" and metric_info("rewards/correctness/mean").better == "higher"
    for key in ("lr", "learning_rate", "epoch", "grad_norm", "rewards/correctness/std", "entropy", "made_up_key"):
        assert metric_info(key).better is None, key
    assert metric_info("completions/mean_length").group == "completions"
    assert metric_info("critic/score/mean").group == "reward"
    assert metric_info("tokens_per_s").unit == "tokens/s"


def test_no_best_for_lr_epoch_grad_norm_and_rl_policy_loss() -> None:
    s = run("trl_grpo.log")
    for key in ("lr", "grad_norm", "epoch", "loss"):
        assert s["metrics"][key]["best"] is None, key
        assert s["metrics"][key]["min"] <= s["metrics"][key]["max"]
    assert s["metrics"]["reward"]["best"] == s["metrics"]["reward"]["max"]
    assert s["metrics"]["step_time"]["best"] == s["metrics"]["step_time"]["min"]
    hf = run("hf5_trainer.log")
    assert hf["metrics"]["loss"]["best"] == hf["metrics"]["loss"]["min"]  # supervised: lower is better


def test_rl_summary_shows_each_reward_component_and_completion_length() -> None:
    s = run("trl_grpo.log")
    assert s["rl"] == {"reward": 1.25, "reward_key": "reward",
                       "components": {"reward_length": 0.875, "reward_has_cat": 0.375},
                       "completion_length": 10.25, "clipped_ratio": 0.75}
    from gputrain.logs.report import render_text

    text = render_text(s)
    assert "reward_length 0.875" in text and "completion length 10.25" in text
    assert run("trl_sft.log")["rl"] is None


@pytest.mark.parametrize(
    ("line", "rank", "text"),
    [
        ("[default1]:[rank1]: RuntimeError: boom", 1, "RuntimeError: boom"),
        ("[default0]:step 3/40 | loss 1.0", 0, "step 3/40 | loss 1.0"),
        ("[trainer3]:hello", 3, "hello"),
        ("no prefix [rank2]: here", None, "no prefix [rank2]: here"),
    ],
)
def test_launcher_prefix_is_the_rank(line: str, rank: int | None, text: str) -> None:
    assert split_rank(line) == (rank, text)


def test_two_ranks_on_one_line_and_ansi_colours() -> None:
    rec = parse_line("[default0]:    \x1b[A[default0]:{'loss': '3.19', 'epoch': '0.9375'}")
    assert (rec.kind, rec.fmt, rec.rank, rec.values) == ("metrics", "hf", 0, {"loss": 3.19, "epoch": 0.9375})
    rec = parse_line("\x1b[31mstep:  1  \x1b[32mloss: 12.2510  \x1b[34mtps: 1,234  \x1b[35mmfu: 12.48%\x1b[39m")
    assert (rec.step, rec.values["loss"], rec.values["tokens_per_s"], rec.values["mfu"]) == (1, 12.251, 1234.0, 12.48)
