"""The mechanisms the ``wild10`` field logs (and #30's leftovers) showed missing, one per test, on lines of the
shapes those logs have and their siblings' wordings: each a rule about words every tool of a kind prints, not
about one log.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gputrain.doctor import prescribe
from gputrain.logs.fatal import scan
from gputrain.logs.parse import parse_line
from tests.support.field_logs import summary_of_text as _summary


@pytest.mark.parametrize("text", [
    "RuntimeError: \n        CUDA Setup failed despite GPU being available. Please run the following",  # bitsandbytes
    "AssertionError: \nThe NVIDIA driver on your system is too old (found version 10010).",
])
def test_an_exceptions_message_on_the_next_line_indented_or_not_is_its_message(text: str, tmp_path: Path) -> None:
    summary = _summary(text, tmp_path)
    assert summary["state"] == "FAILED"
    assert text.split("\n")[1].strip()[:30] in summary["failure"], summary["failure"]


@pytest.mark.parametrize("words", ["pure virtual method called", "terminate called without an active exception",
                                   "terminate called recursively"])
def test_the_cxx_runtimes_own_abort_words_are_the_cause_and_the_sigabrt_their_echo(words: str,
                                                                                   tmp_path: Path) -> None:
    text = (f"{words}\nE1019 08:21:39.599000 3036 torch/distributed/elastic/multiprocessing/api.py:874] failed "
            "(exitcode: -6) local_rank: 0 (pid: 3042) of binary: /usr/bin/python")
    summary = _summary(text, tmp_path)
    assert summary["state"] == "FAILED" and words in summary["failure"], summary["failure"]


def test_a_step_slurm_ended_for_a_task_failure_is_failed_and_the_tasks_own_error_comes_first(tmp_path: Path) -> None:
    verdict = "slurmstepd: error: *** STEP 77.0 ON n1 CANCELLED AT 2026-04-29T23:36:37 DUE TO TASK FAILURE ***"
    alone = _summary(verdict + "\nsrun: error: n1: tasks 0-2: Terminated", tmp_path)
    assert alone["state"] == "FAILED" and "tasks failed" in alone["failure"], alone["failure"]  # was CANCELLED
    both = _summary("ValueError: bad shard index 9\n" + verdict, tmp_path)
    assert both["state"] == "FAILED" and "bad shard index" in both["failure"], both["failure"]


@pytest.mark.parametrize("first", ["srun: error: n4: task 0: Exited with exit code 255",
                                   "slurmstepd: error: *** STEP 5.0 ON n4 CANCELLED AT 2026-01-01T00:00:00 DUE TO "
                                   "TASK FAILURE ***"])
def test_tasks_srun_kills_after_another_task_failed_are_its_teardown_not_the_oom_killer(first: str,
                                                                                         tmp_path: Path) -> None:
    summary = _summary(f"srun: Job step aborted: Waiting up to 302 seconds for job step to finish.\n{first}\n"
                       "srun: error: n4: tasks 1-3: Killed", tmp_path)
    remedy = prescribe(summary, None)
    assert summary["root_cause"]["kind"] != "host_oom", summary["failure"]
    assert remedy is None or "memory" not in remedy.text
    alone = _summary("srun: error: n4: tasks 1-3: Killed", tmp_path)  # no failure before it: still the OOM killer
    assert alone["root_cause"]["kind"] == "host_oom"


@pytest.mark.parametrize(("line", "state", "words"), [
    ("W1221 17:13:59.240000 46660 torch/distributed/elastic/agent/server/api.py:704] Received 1 death signal, "
     "shutting down workers", "FAILED", "SIGHUP"),
    ("WARNING:torch.distributed.elastic.agent.server.api:Received Signals.SIGTERM death signal, shutting down "
     "workers", "FAILED", "SIGTERM"),
    ("Received Signals.SIGINT death signal, shutting down workers", "CANCELLED", "SIGINT"),
])
def test_the_launchers_own_death_by_a_signal_ends_the_run_and_names_the_signal(line: str, state: str, words: str,
                                                                               tmp_path: Path) -> None:
    summary = _summary("{'loss': 0.151, 'epoch': 0.29}\n" + line, tmp_path)
    assert summary["state"] == state
    if state == "FAILED":
        assert words in summary["failure"], summary["failure"]


@pytest.mark.parametrize("line", [
    "RuntimeError: [enforce fail at inline_container.cc:471] . PytorchStreamWriter failed writing file data/3: file wr",
    "RuntimeError: [enforce fail at inline_container.cc:664] . unexpected pos 704 vs 598",
    "wandb: ERROR Run 7xk2ab9q errored: OSError(28, 'No space left on device')",
])
def test_torch_saves_writer_failing_and_a_repr_of_enospc_are_a_full_disk(line: str, tmp_path: Path) -> None:
    summary = _summary("{'loss': 0.41, 'epoch': 0.5}\n" + line, tmp_path)
    remedy = prescribe(summary, None)
    assert summary["root_cause"]["kind"] == "disk_full" and remedy is not None and "disk" in remedy.text


@pytest.mark.parametrize(("line", "kind"), [
    ("wandb: ERROR Run 7xk2ab9q errored: OSError(28, 'No space left on device')", "disk_full"),
    ("Trial train_fn_1 failed with RuntimeError('CUDA out of memory. Tried to allocate 2.00 GiB')", "cuda_oom"),
    ("worker 3 crashed: ValueError('label 12 out of range')", "exception"),
])
def test_an_exception_shown_as_its_repr_after_the_word_that_it_ended_the_run_is_the_cause(line: str,
                                                                                          kind: str) -> None:
    found = scan(line)
    assert found and found[0].kind == kind and found[0].exception, found


def test_a_repr_in_a_retry_or_warning_line_is_no_failure() -> None:
    assert not scan("wandb: Network error (ConnectionError), entering retry loop.")
    assert not scan("Retrying after ConnectionError('reset by peer') (attempt 2/5)")


@pytest.mark.parametrize("line", [
    "RuntimeError: The NVIDIA driver on your system is too old (found version 11040).",
    "RuntimeError: CUDA error: CUDA driver version is insufficient for CUDA runtime version",
    "RuntimeError: CUDA error: no kernel image is available for execution on the device",
    "OSError: libcudart.so.11.0: cannot open shared object file: No such file or directory",
])
def test_a_cuda_stack_that_does_not_fit_the_machine_is_its_own_cause_with_a_driver_remedy(line: str,
                                                                                          tmp_path: Path) -> None:
    summary = _summary(line, tmp_path)
    remedy = prescribe(summary, None)
    assert summary["root_cause"]["kind"] == "cuda_setup", summary["root_cause"]
    assert remedy is not None and "driver" in remedy.text and "CUDA_LAUNCH_BLOCKING" not in remedy.text


def test_a_ctrl_c_read_off_a_bare_log_is_named_as_the_interrupt_not_a_users_cancel(tmp_path: Path) -> None:
    summary = _summary("Traceback (most recent call last):\n  File \"train.py\", line 9, in <module>\n    main()\n"
                       "KeyboardInterrupt", tmp_path)
    assert summary["state"] == "CANCELLED" and "interrupted (Ctrl-C" in summary["failure"], summary["failure"]


@pytest.mark.parametrize(("line", "expected"), [
    ("Iter 20: Train loss 2.135, Learning Rate 1.000e-05, It/sec 0.189, Tokens/sec 281.103, Trained Tokens 35004, "
     "Peak mem 9.707 GB", {"loss": 2.135, "lr": 1e-05, "steps_per_s": 0.189, "tokens_per_s": 281.103,
                           "gpu_mem_gib": 9.707}),  # MLX
    ("Training epoch 0, iteration 125/149 | lr: 3e-05 | reduced_train_loss: 1.34 | train_step_timing in s: 0.03147",
     {"reduced_train_loss": 1.34, "step_time_s": 0.03147}),  # NeMo 2
    ("Epoch 0:   1%|          | 795/77225 [9:07:58<878:01:48, 41.36s/it, v_num=, reduced_train_loss=3.090, "
     "global_step=794.0, train_step_timing in s=41.2]", {"reduced_train_loss": 3.09, "step_time_s": 41.2}),  # NeMo 1
    ("step 10 | loss 2.3 | samples/s 12.5 | iter/s 3.1", {"loss": 2.3, "samples_per_s": 12.5, "steps_per_s": 3.1}),
])
def test_rate_and_unit_keys_are_read_as_the_standard_metric(line: str, expected: dict[str, float]) -> None:
    values = parse_line(line).values
    for key, value in expected.items():
        assert values.get(key) == pytest.approx(value), (key, values)


@pytest.mark.parametrize(("line", "kind", "words"), [
    # Python's CalledProcessError for a child a signal killed (a launcher's echo that still says how it ended)
    ("subprocess.CalledProcessError: Command '['/usr/bin/python', '-u', 'train.py']' died with <Signals.SIGKILL: 9>.",
     "host_oom", "SIGKILL"),
    ("subprocess.CalledProcessError: Command '['python', 'train.py']' died with <Signals.SIGSEGV: 11>.",
     "signal", "SIGSEGV"),
    # torch's DataLoader worker's own report of its crash
    ("ERROR: Unexpected segmentation fault encountered in worker.", "signal", "data loader worker crashed"),
    ("ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient shared memory (shm).",
     "shm", "data loader worker crashed"),
    # srun could not start the step's tasks
    ("srun: error: task 0 launch failed: Error configuring interconnect", "setup", "could not start the step"),
])
def test_launchers_and_loaders_own_words_about_a_child_that_died_or_never_started(line: str, kind: str, words: str,
                                                                                  tmp_path: Path) -> None:
    summary = _summary("step 1 | loss 2.0\n" + line, tmp_path)
    assert summary["state"] == "FAILED" and summary["root_cause"]["kind"] == kind, summary["root_cause"]
    assert words in summary["failure"], summary["failure"]


@pytest.mark.parametrize(("line", "expected"), [
    (" validation loss at iteration 150 on test set | lm loss value: 1.177732E+01 | lm loss PPL: 1.302641E+05 | ",
     {"test_loss": 11.77732, "test_ppl": 130264.1}),
    (" validation loss at iteration 1000 | lm loss value: 2.440000E+00 | lm loss PPL: 1.147304E+01 | ",
     {"val_loss": 2.44, "val_ppl": 11.47304}),
])
def test_megatrons_evaluation_line_is_the_splits_loss_and_perplexity(line: str, expected: dict[str, float]) -> None:
    record = parse_line(line)
    assert record.values == pytest.approx(expected)  # was {"value": …, "PPL": …}


@pytest.mark.parametrize(("line", "kind", "words"), [
    ("torch.distributed.DistBackendError: [Rank 0]: Timeout at NCCL work: 12, last enqueued NCCL work: 12, last "
     "completed NCCL work: 11.", "nccl", "Timeout at NCCL work"),  # torch 2.4+ when the abort reaches Python
    ("RuntimeError: NCCL Error 2: unhandled system error (run with NCCL_DEBUG=INFO for details)", "nccl", "NCCL Error"),
    ("[rank3]:[E1120 10:00:00.123 ProcessGroupNCCL.cpp:1316] [PG 0 Rank 3] Heartbeat monitor timed out! Process will "
     "be terminated after dumping debug info.", "nccl", "heartbeat monitor timed out"),
    ("slurmstepd: error: *** JOB 12 STEPD TERMINATED ON n1 AT 2024-01-01T00:00:00 DUE TO JOB NOT ENDING WITH SIGNALS "
     "***", "signal", "did not end when Slurm signalled them"),
])
def test_nccl_and_slurm_wordings_of_a_hang_end_the_run_with_their_kind(line: str, kind: str, words: str,
                                                                       tmp_path: Path) -> None:
    summary = _summary("step 1 | loss 2.0\n" + line, tmp_path)
    assert summary["state"] == "FAILED" and summary["root_cause"]["kind"] == kind, summary["root_cause"]
    assert words in summary["failure"], summary["failure"]
    if kind == "nccl":
        remedy = prescribe(summary, None)
        assert remedy is not None and "--debug" in remedy.text


@pytest.mark.parametrize(("line", "step", "expected"), [
    # torchtune's bar: "{epoch}|{global step}|Loss: {loss}" as the description (was read as no metric at all)
    ("1|12|Loss: 1.0432602167129517: 100%|██████████| 12/12 [00:30<00:00,  2.50s/it]", 12,
     {"loss": 1.0432602167129517, "epoch": 1.0}),
    ("3|1500|Loss: 0.8123:  45%|████▌     | 450/1000 [10:00<12:13,  1.33s/it]", 1500, {"loss": 0.8123, "epoch": 3.0}),
    # MaxText: a per-device rate
    ("completed step: 10, seconds: 1.234, TFLOP/s/device: 123.4, Tokens/s/device: 5678.9, loss: 10.123", 10,
     {"loss": 10.123, "tokens_per_s_per_gpu": 5678.9}),
    # two words, one metric
    ("Step 500 | Train Loss: 2.3456 | LR: 3.0e-04 | Grad Norm: 0.95 | Tokens/s: 12345", 500,
     {"loss": 2.3456, "lr": 3e-4, "grad_norm": 0.95, "tokens_per_s": 12345.0}),
])
def test_values_in_a_bars_description_per_device_rates_and_two_word_names(line: str, step: int,
                                                                            expected: dict[str, float]) -> None:
    record = parse_line(line)
    assert record.kind == "metrics" and record.step == step, record
    for key, value in expected.items():
        assert record.values.get(key) == pytest.approx(value), (key, record.values)


def test_a_bar_whose_description_has_no_values_is_still_no_metric_line() -> None:
    assert parse_line("Tokenizing: 100%|██████████| 10/10 [00:00<00:00, 50.0it/s]").kind != "metrics"


@pytest.mark.parametrize("end", [
    "100 epochs completed in 1.234 hours.",  # Ultralytics
    "(main_task pid=1234) Final validation metrics: {'val/test_score/openai/gsm8k': 0.71}",  # verl
    "[07/12 10:00:00 d2.engine.hooks]: Total training time: 1:24:30 (0:00:45 on hooks)",  # detectron2
])
def test_more_trainers_own_words_that_training_ended(end: str, tmp_path: Path) -> None:
    assert _summary("step 1 | loss 2.0\nstep 2 | loss 1.5\n" + end, tmp_path)["state"] == "COMPLETED"


def test_an_epoch_count_in_a_plan_is_no_end(tmp_path: Path) -> None:
    assert _summary("Training for 100 epochs...\nstep 1 | loss 2.0", tmp_path)["state"] == "UNKNOWN"


def test_rays_memory_monitor_killing_workers_is_the_hosts_oom(tmp_path: Path) -> None:
    summary = _summary("step 1 | loss 2.0\n(raylet) node_manager.cc:3007: 1 Workers (tasks / actors) killed due to "
                       "memory pressure (OOM), 0 Workers crashed due to other reasons at node (ID: 3a5f, IP: 10.0.0.1) "
                       "over the last time period.", tmp_path)
    remedy = prescribe(summary, None)
    assert summary["state"] == "FAILED" and summary["root_cause"]["kind"] == "host_oom"
    assert remedy is not None and "memory" in remedy.text
