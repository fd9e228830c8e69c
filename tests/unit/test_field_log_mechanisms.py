"""The mechanisms the ``wild`` field logs showed missing (#30), one per test, on lines of the shapes those logs have.

Each mechanism is general (words and shapes every framework prints), not a rule keyed on one log's text: a CUDA
fault reported anywhere in a line, a full disk whatever raised it, an exception quoted inside another message,
torchrun's box seen without its header, a framework's "worker died" line, a trainer's own word that it finished,
a progress bar that a traceback was printed onto, and the unfinished last line of a live log.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gputrain.doctor import prescribe
from gputrain.logs.fatal import scan
from gputrain.logs.summarize import summarize
from gputrain.logs.verdict import infer_end
from tests.support.field_logs import summary_of_text as _summary_of_line


def _kinds(text: str) -> list[tuple[str, str]]:
    return [(e.kind, e.headline) for e in scan(text)]


@pytest.mark.parametrize(("line", "kind", "words"), [
    ("06/26 18:54:31 [ERROR] trainer - <class 'RuntimeError'> at trainer.py:101 - CUDA error: an illegal memory "
     "access was encountered", "cuda_error", "illegal memory access"),
    ("  6%|▋  | 89/1398 [1:32:11<25:28:13, 70.05s/it]../aten/src/ATen/native/cuda/Indexing.cu:1284: "
     "indexSelectLargeIndex: block: [134,0,0], thread: [0,0,0] Assertion `srcIndex < srcSelectDimSize` failed.",
     "cuda_error", "srcIndex < srcSelectDimSize"),
    ("[Rank 1] NCCL watchdog thread terminated with exception: CUDA error: uncorrectable ECC error encountered",
     "gpu_hardware", "uncorrectable ECC error"),
    ("RuntimeError: CUDA error: uncorrectable ECC error encountered", "gpu_hardware", "ECC"),
])
def test_a_cuda_fault_anywhere_in_a_line_is_a_fatal_event(line: str, kind: str, words: str) -> None:
    found = _kinds(line)
    assert found and found[0][0] == kind and words in found[0][1], found


@pytest.mark.parametrize("line", [
    "OSError: [Errno 28] No space left on device",
    "tensorflow.python.framework.errors_impl.ResourceExhaustedError: models/x/part-00000; No space left on device",
    "OSError: [Errno 122] Disk quota exceeded",
    "RuntimeError: [enforce fail at inline_container.cc:471] . PytorchStreamWriter failed writing file data/228: "
    "file write failed",
])
def test_a_full_disk_is_its_own_cause_not_memory_and_the_remedy_says_disk(line: str, tmp_path: Path) -> None:
    assert _kinds(line)[0][0] == "disk_full"
    remedy = prescribe(_summary_of_line(line, tmp_path), None)
    assert remedy is not None and "disk" in remedy.text and "batch" not in remedy.text


def test_oom_named_only_as_a_possibility_in_an_echo_is_not_an_oom() -> None:
    line = ("TrainingFailedError: The Ray Train run failed. Please inspect the previous error messages for a cause. "
            "After fixing the issue (assuming that the error is not caused by your own application logic, but "
            "rather an error such as OOM), you can restart the run from scratch or continue this run.")
    ((kind, headline),) = _kinds(line)
    assert kind == "exception" and headline.startswith("TrainingFailedError")


def test_an_exception_quoted_inside_another_message_is_read() -> None:
    text = ("Collective WorkNCCL(SeqNum=2, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=1000000) raised the "
            "following async exception: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details)\n"
            "ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error. \n")
    found = scan(text)
    assert found[0].kind == "nccl" and found[0].headline.startswith("NCCL error: unhandled system error")


def test_torchruns_box_counts_without_its_header() -> None:
    box = ("------------------------------------------------------------\nRoot Cause (first observed failure):\n[0]:\n"
           "  time      : 2024-03-05_07:01:51\n  host      : node7\n  rank      : 0 (local_rank: 0)\n"
           "  exitcode  : 1 (pid: 69811)\n  error_file: <N/A>\n")
    found = scan(box)
    assert [(e.kind, e.rank, e.host) for e in found] == [("exit_code", 0, "node7")]
    assert infer_end(box) is not None and infer_end(box)[0] == "FAILED"  # type: ignore[index]


def test_a_framework_saying_a_worker_died_is_the_fatal_event_before_the_echo() -> None:
    text = ("2023-01-17 17:21:35,472\tWARNING worker.py:1829 -- A worker died or was killed while executing a task by "
            "an unexpected system error. To troubleshoot the problem, check the logs for the dead worker.\n"
            "ray.exceptions.RayTaskError(RuntimeError): ray::TrainTrainable.train() (pid=1876)\n")
    found = scan(text)
    assert found[0].kind == "process_died" and "worker died" in found[0].headline


@pytest.mark.parametrize("end", ["[INFO] Reached max_steps (1635), stopping training.",
                                 "***** train metrics *****", "Training completed. Do not forget to share your model"])
def test_a_trainers_own_word_that_it_finished_is_completed(end: str) -> None:
    inferred = infer_end(f"step 10 loss 2.0\n{end}\n")
    assert inferred is not None and inferred[0] == "COMPLETED"


def test_a_bar_that_a_traceback_was_printed_onto_still_counts(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    log.write_text("Epoch 0:  16%|█▌  | 7395/45743 [13:13:43<68:36:00,  6.44s/it, train_loss: 0.084, avg_loss: 0.080]"
                   "[rank3]: Traceback (most recent call last):\n[rank3]:   File \"t.py\", line 5, in <module>\n"
                   "[rank3]: OSError: [Errno 5] Input/output error: '/app/x'\n")
    s = summarize(log, write=False)
    assert s["metrics"]["train_loss"]["last"] == pytest.approx(0.084) and "Input/output error" in s["failure"]


def test_the_unfinished_last_line_of_a_live_log_counts_and_is_read_again_when_complete(tmp_path: Path) -> None:
    from gputrain.logs.scan import LogScanner

    log = tmp_path / "training_output.log"
    log.write_text("step 1 | loss 2.0\n 45%|████  | 45/100 [00:10<00:12, 4.5it/s, loss=nan]")  # no newline yet
    s = summarize(log, write=False)
    assert s["metrics"]["loss"]["nonfinite"] and "loss" in " ".join(s["alerts"])
    scanner = LogScanner(log)
    scanner.scan()
    assert scanner.provisional().table.metrics["loss"].count == 2
    saved = LogScanner.from_json(scanner.to_json())  # what a job folder's state file keeps: the line still partial
    assert saved.table.metrics["loss"].count == 1
    with log.open("a") as fh:
        fh.write("\r 46%|████  | 46/100 [00:10<00:12, 4.5it/s, loss=1.5]\n")
    saved.scan()  # completed once, not counted twice
    assert saved.table.metrics["loss"].count == 2 and saved.table.metrics["loss"].last[1] == pytest.approx(1.5)
    log.write_text("step 1 | loss 2.0\nstep 2 | loss 0.0")  # a value still being written: left out
    cut = LogScanner(log)
    cut.scan()
    assert cut.provisional().table.metrics["loss"].count == 1


def test_a_fairseq_style_lowercase_epoch_bar_with_a_loss_is_training(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    log.write_text("epoch 001:  37%|█  | 521/1426 [02:47<04:46,  3.16it/s, loss=0.138, accuracy=0.98125, ups=3.16]\n"
                   "Map: 100%|██████████| 11720/11720 [00:06<00:00, 1720.59 examples/s]\n")
    metrics = summarize(log, write=False)["metrics"]
    assert metrics["loss"]["last"] == pytest.approx(0.138) and metrics["accuracy"]["last"] == pytest.approx(0.98125)


def test_a_rank_prefix_after_a_timestamp_still_comes_off() -> None:
    from gputrain.logs.prefixes import normalize

    assert normalize("2024-11-20 14:37:16 [rank3]: torch.OutOfMemoryError: CUDA out of memory.") == (
        3, "torch.OutOfMemoryError: CUDA out of memory.")


def test_slurm_tearing_a_step_down_after_an_oom_kill_is_no_cancel() -> None:
    text = ("slurmstepd-n1: error: Detected 1 oom-kill event(s) in StepId=9411285.0. Some of your processes may have "
            "been killed by the cgroup out-of-memory handler.\nsrun: error: n1: task 0: Out Of Memory\n"
            "slurmstepd-n1: error: *** STEP 9411285.0 ON n1 CANCELLED AT 2022-05-17T17:58:10 ***\n")
    inferred = infer_end(text)
    assert inferred is not None and inferred[0] == "FAILED"
    alone = "slurmstepd: error: *** JOB 12 ON n1 CANCELLED AT 2022-05-17T17:58:10 ***\n"  # nothing failed before
    assert infer_end(alone) is not None and infer_end(alone)[0] == "CANCELLED"  # type: ignore[index]


def test_an_oom_kill_headline_says_memory(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    log.write_text("slurmstepd: error: Detected 1 oom-kill event(s) in StepId=37205392.0.\n")
    assert "memory" in summarize(log, write=False)["failure"]


@pytest.mark.parametrize("line", [
    "RuntimeError: DataLoader worker (pid 325) is killed by signal: Bus error.",
    "RuntimeError: DataLoader worker (pid 3867) is killed by signal: Bus error. It is possible that dataloader's "
    "workers are out of shared memory. Please try to raise your shared memory limit.",
])
def test_a_data_loader_bus_error_is_shared_memory_and_the_remedy_says_so(line: str, tmp_path: Path) -> None:
    assert _kinds(line)[0][0] == "shm"
    remedy = prescribe(_summary_of_line(line, tmp_path), None)
    assert remedy is not None and "shared memory" in remedy.text and "num_workers" in remedy.text


def test_a_users_cancel_stays_a_cancel_when_the_launcher_printed_the_signal_first() -> None:
    text = ("torch.distributed.elastic.multiprocessing.api.SignalException: Process 4242 got signal: 15\n"
            "slurmstepd: error: *** JOB 12 ON n1 CANCELLED AT 2022-05-17T17:58:10 ***\n")
    inferred = infer_end(text)
    assert inferred is not None and inferred[0] == "CANCELLED"


def test_the_drivers_xid_line_is_a_gpu_hardware_fault() -> None:
    found = _kinds("NVRM: Xid (PCI:0000:06:00): 79, GPU has fallen off the bus.")
    assert found and found[0][0] == "gpu_hardware" and "fallen off the bus" in found[0][1]


def test_python_loggings_default_prefix_does_not_hide_a_metric_line() -> None:
    from gputrain.logs.parse import parse_line

    record = parse_line("INFO:tensorflow:loss = 2.302585, step = 1")
    assert record.kind == "metrics" and record.values == {"loss": pytest.approx(2.302585)} and record.step == 1


@pytest.mark.parametrize("line", [
    "RuntimeError: CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasSgemm( handle, opa, opb)`",
    "RuntimeError: cuDNN error: CUDNN_STATUS_EXECUTION_FAILED",
])
def test_a_cublas_or_cudnn_execution_failure_is_a_cuda_kernel_fault(line: str) -> None:
    assert _kinds(line)[0][0] == "cuda_error"


def test_a_json_metric_dict_after_a_logger_prefix_with_string_values_is_read() -> None:
    from gputrain.logs.parse import parse_line

    record = parse_line('2021-01-06 00:35:15 | INFO | train | {"epoch": 103, "train_loss": "506.144", "train_lr": '
                        '"5e-05", "train_num_updates": "3185"}')
    assert record.kind == "metrics" and record.values["train_loss"] == pytest.approx(506.144)


def test_hydras_own_error_line_is_the_launchers_account_and_its_message_the_headline() -> None:
    text = ("[2022-06-08 08:12:42,395][src.training_pipeline][INFO] - Instantiating model <src.models.M>\n"
            "Error executing job with overrides: []\n"
            "Error locating target 'src.models.M', see chained exception above.\nfull_key: model\n\n"
            "Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace.\n")
    inferred = infer_end(text)
    assert inferred is not None and inferred[0] == "FAILED"
    assert scan(text)[0].headline.startswith("Error locating target 'src.models.M'")
    from gputrain.logs.verdict import choose

    full = "Error executing job with overrides: []\nTraceback (most recent call last):\n  File \"t.py\"\nKeyError: 1\n"
    root = choose(scan(full))
    assert root is not None and root.headline.startswith("KeyError")  # the traceback, when there is one, wins


def test_a_moab_wallclock_limit_is_a_timeout() -> None:
    inferred = infer_end("job deleted\nMOAB_INFO:  job exceeded wallclock limit\n")
    assert inferred is not None and inferred[0] == "TIMEOUT"


@pytest.mark.parametrize(("text", "state"), [
    ("Epoch 1/2\n10/10 [==============================] - 3s - loss: 0.3 - acc: 0.8\n"
     "Epoch 2/2\n10/10 [==============================] - 3s - loss: 0.2 - acc: 0.9\n", "COMPLETED"),
    ("Epoch 99/100\n1079/1079 - 11s - loss: 0.18 - 11s/epoch\nEpoch 100/100\n1079/1079 - 11s - loss: 0.17\n",
     "COMPLETED"),
    ("Epoch 1/2\n10/10 [==============================] - 3s - loss: 0.3\nEpoch 2/2\n"
     " 4/10 [=====>........] - ETA: 1s - loss: 0.25\n", None),  # the last epoch is still running
])
def test_the_last_epoch_of_n_finished_is_completed(text: str, state: str | None) -> None:
    inferred = infer_end(text)
    assert (inferred[0] if inferred else None) == state


def test_the_device_side_assertions_boilerplate_on_an_oom_line_keeps_it_an_oom() -> None:
    line = ("RuntimeError: CUDA error: out of memory CUDA kernel errors might be asynchronously reported at some other "
            "API call. Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.")
    assert _kinds(line)[0][0] == "cuda_oom"


def test_a_rocm_device_side_assertion_is_a_cuda_kernel_fault() -> None:
    line = ("/pytorch/aten/src/ATen/native/hip/Indexing.hip:1292: indexSelectLargeIndex: Device-side assertion "
            "`srcIndex < srcSelectDimSize' failed.")
    found = _kinds(line)
    assert found and found[0][0] == "cuda_error" and "srcIndex < srcSelectDimSize" in found[0][1]


def test_a_cuda_warning_at_teardown_after_a_finished_run_is_no_failure() -> None:
    text = ("{'train_runtime': 12.5, 'train_samples_per_second': 3.1, 'train_loss': 0.5, 'epoch': 1.0}\n"
            "[W CUDAGuardImpl.h:119] Warning: CUDA warning: driver shutting down (function destroyEvent)\n"
            "[W ProcessGroupNCCL.cpp:1250] Warning: WorkNCCL destructor: CUDA error: driver shutting down\n")
    inferred = infer_end(text)
    assert inferred is not None and inferred[0] == "COMPLETED"


def test_a_json_record_anywhere_in_a_line_is_read() -> None:
    from gputrain.logs.parse import parse_line

    record = parse_line('json_stats: {"accuracy_cls": 1.000000, "eta": "0:21:51", "iter": 55080, "loss": 0.024404}')
    assert record.kind == "metrics" and record.values["loss"] == pytest.approx(0.024404)


@pytest.mark.parametrize(("line", "key", "value"), [
    ("[2019-03-21 18:52:29,476 INFO] Step 2650/200000; acc:  32.97; ppl: 46.77; xent: 3.85; lr: 0.00033;", "xent",
     3.85),
    ("Epoch  1, 13400/37527; acc:   1.89; ppl: 20872.71; xent:   9.95; 3595 src tok/s;", "ppl", 20872.71),
])
def test_a_key_value_line_without_the_word_loss_is_a_metric_line(line: str, key: str, value: float,
                                                                  tmp_path: Path) -> None:
    # found by the body scan too
    assert _summary_of_line(line, tmp_path)["metrics"][key]["last"] == pytest.approx(value)


def test_a_cpp_terminate_is_read_as_its_exception_and_bad_alloc_is_host_memory(tmp_path: Path) -> None:
    text = ("2018-08-15 12:23:32.467195: epoch 21, step 40, loss = 0.29\n"
            "terminate called after throwing an instance of 'std::bad_alloc'\n  what():  std::bad_alloc\nAborted\n")
    log = tmp_path / "x.log"
    log.write_text(text)
    s = summarize(log, write=False)
    assert s["state"] == "FAILED" and s["cause"] == "host_oom" and s["failure"].startswith("std::bad_alloc: std::")
    remedy = prescribe(s, None)
    assert remedy is not None and "memory" in remedy.text


@pytest.mark.parametrize("line", ["Exited with code 137", "train_1 exited with code 137",
                                  "Process finished with exit code 137"])
def test_a_container_or_shells_exit_code_137_is_a_sigkill_that_names_the_code(line: str) -> None:
    inferred = infer_end(line + "\n")
    assert inferred is not None and inferred[0] == "FAILED"
    (event,) = scan(line + "\n")
    assert event.kind == "host_oom" and "SIGKILL" in event.headline and "137" in event.headline


@pytest.mark.parametrize(("line", "words", "kind"), [
    ("subprocess.CalledProcessError: Command returned non-zero exit status -11", "SIGSEGV", "signal"),
    ("subprocess.CalledProcessError: Command 'docker run x python train.py' returned non-zero exit status 137.",
     "SIGKILL", "host_oom"),
    ("subprocess.CalledProcessError: Command '['python.exe', 'train.py']' returned non-zero exit status 3221225477.",
     "access violation", "exit_code"),
])
def test_the_exit_status_an_echo_carries_is_the_launchers_account(line: str, words: str, kind: str) -> None:
    from gputrain.logs.verdict import choose

    root = choose(scan(line + "\n"))
    assert root is not None and root.kind == kind and words in root.headline


def test_a_logger_box_of_rows_under_group_headings_is_read(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    log.write_text("------------------------\n| rollout/      |       |\n|    ep_rew_mean | -0.5 |\n"
                   "| train/  |       |\n|    loss      | 20.1  |\n|    n_updates | 18    |\n----------------\n")
    metrics = summarize(log, write=False)["metrics"]
    assert metrics["rollout/ep_rew_mean"]["last"] == -0.5 and metrics["loss"]["last"] == pytest.approx(20.1)


@pytest.mark.parametrize("row", [
    "        2/3     0.698G     0.1626         24        256: 100%|##########| 3/3 [00:00<00:00,  5.17it/s]",
    "        2/3     0.698G     0.1626         24        256: 100% 3/3 [00:41<00:00,  1.59s/it]",  # no bar, no "|"
])
def test_a_column_header_over_a_row_of_values_is_read_when_its_first_column_is_the_epoch(row: str,
                                                                                          tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    log.write_text(f"\n      Epoch    GPU_mem       loss  Instances       Size\n{row}\n")
    metrics = summarize(log, write=False)["metrics"]
    assert metrics["loss"]["last"] == pytest.approx(0.1626) and metrics["epoch"]["last"] == 2
    log.write_text(f"\n      Images    GPU_mem       loss  Instances       Size\n{row}\n")  # not an epoch table
    assert "loss" not in summarize(log, write=False)["metrics"]


@pytest.mark.parametrize(("line", "name"), [
    ("torch._dynamo.exc.FailOnRecompileLimitHit: recompile_limit reached with fullgraph=True.",
     "torch._dynamo.exc.FailOnRecompileLimitHit"),
    ("triton.runtime.autotuner.OutOfResources: out of resource: shared memory, Required: 133136, Hardware limit: "
     "101376.", "triton.runtime.autotuner.OutOfResources"),
])
def test_an_exception_is_known_by_its_module_path_whatever_its_class_name_ends_with(line: str, name: str) -> None:
    found = scan("Iter 10: Train loss 1.2\n" + line + "\n")
    assert [e.exception for e in found] == [name]
    inferred = infer_end("Iter 10: Train loss 1.2\n" + line + "\n")
    assert inferred is not None and inferred[0] == "FAILED"
    # a module path in lower case: a logger's name or a sentence is no exception
    assert scan("lightning.pytorch.utilities.rank_zero: GPU available: True\n") == []


def test_libcxx_terminate_wording_is_a_cpp_terminate_with_its_message(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    log.write_text("Iter 20: Train loss 0.758, Learning Rate 1.000e-05\n"
                   "libc++abi: terminating due to uncaught exception of type std::runtime_error: [METAL] Command "
                   "buffer execution failed: Internal Error (0000000e:Internal Error)\n")
    s = summarize(log, write=False)
    assert s["state"] == "FAILED" and "std::runtime_error: [METAL] Command buffer execution failed" in s["failure"]
    log.write_text("libc++abi: terminating with uncaught exception of type std::bad_alloc: std::bad_alloc\n")
    assert summarize(log, write=False)["cause"] == "host_oom"


@pytest.mark.parametrize("line", [
    "triton.runtime.errors.OutOfResources: out of resource: shared memory, Required: 147456, Hardware limit: 101376. "
    "Reducing block sizes or `num_stages` may help.",
    "RuntimeError: CUDA error: too many resources requested for launch",
])
def test_a_kernel_out_of_on_chip_resources_is_no_full_dev_shm(line: str, tmp_path: Path) -> None:
    s = _summary_of_line(line, tmp_path)
    remedy = prescribe(s, None)
    assert s["state"] == "FAILED" and s["cause"] == "kernel_resources"
    assert remedy is not None and "block size" in remedy.text and "/dev/shm" not in remedy.text


def test_an_oom_headline_names_the_backend_the_message_names(tmp_path: Path) -> None:
    line = ("torch.OutOfMemoryError: HIP out of memory. Tried to allocate 124.00 MiB. GPU 0 has a total capacity of "
            "19.94 GiB of which 554.47 MiB is free. Of the allocated memory 15.87 GiB is allocated by PyTorch, and "
            "165.29 MiB is reserved by PyTorch but unallocated.")
    s = _summary_of_line(line, tmp_path)
    assert s["failure"].startswith("HIP out of memory: tried to allocate 0.12 GiB on GPU 0")
    assert _summary_of_line(line.replace("HIP", "CUDA"), tmp_path)["failure"].startswith("CUDA out of memory")


@pytest.mark.parametrize(("line", "kind", "words"), [
    ("zsh: killed     python train.py", "host_oom", "SIGKILL"),
    ("[1]    24608 killed     python -m mlx_lm.lora --train", "host_oom", "SIGKILL"),
    ("Killed: 9", "host_oom", "SIGKILL"),
    ("zsh: segmentation fault  python train.py", "signal", "SIGSEGV"),
    ("[1]    24608 abort      python -m mlx_lm.lora --model Qwen/Qwen1.5-0.5B --train", "signal", "SIGABRT"),
    ("/bin/bash: line 1:  2741 Bus error               (core dumped) python train.py", "signal", "SIGBUS"),
])
def test_a_shells_job_report_of_a_signal_death_is_the_launchers_account(line: str, kind: str, words: str) -> None:
    from gputrain.logs.verdict import choose

    root = choose(scan("step 10 | loss 2.1\n" + line + "\n"))
    assert root is not None and root.kind == kind and words in root.headline
    inferred = infer_end("step 10 | loss 2.1\n" + line + "\n")
    assert inferred is not None and inferred[0] == "FAILED"
    assert scan("the job was killed by the user yesterday\n") == []  # prose is no job report


@pytest.mark.parametrize("line", [
    "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.",
    "numpy.core._exceptions._ArrayMemoryError: Unable to allocate 3.50 GiB for an array with shape (1000, 470) and "
    "data type float64",
])
def test_an_out_of_memory_of_the_host_is_not_read_as_the_gpus(line: str, tmp_path: Path) -> None:
    s = _summary_of_line(line, tmp_path)
    remedy = prescribe(s, None)
    assert s["cause"] == "host_oom" and remedy is not None and "host memory" in remedy.text


def test_a_negative_windows_exit_code_is_its_ntstatus_not_a_signal() -> None:
    (event,) = scan("Process finished with exit code -1073741819 (0xC0000005)\n")
    assert "access violation" in event.headline and "signal" not in event.headline


@pytest.mark.parametrize("end", ["[1]    24608 abort      python -m mlx_lm.lora --train", "Aborted (core dumped)"])
def test_the_abort_that_ends_a_cpp_terminate_is_its_echo_not_the_cause(end: str) -> None:
    from gputrain.logs.verdict import choose

    for terminate in ("libc++abi: terminating due to uncaught exception of type std::runtime_error: [METAL] Command "
                      "buffer execution failed: Internal Error",
                      "terminate called after throwing an instance of 'c10::Error'\n  what():  driver shutting down"):
        root = choose(scan(f"Iter 20: Train loss 0.758\n{terminate}\n{end}\n"))
        assert root is not None and root.exception in ("std::runtime_error", "c10::Error"), root
    root = choose(scan(f"Iter 20: Train loss 0.758\n{end}\n"))  # an abort alone is still the cause
    assert root is not None and ("SIGABRT" in root.headline or "Aborted" in root.headline)


@pytest.mark.parametrize(("text", "expected"), [
    ("Epoch 1 | train loss: 0.512 | val loss: 0.634\nEpoch 2 | train loss: 0.402 | val loss: 0.601\n",
     {"loss": 0.402, "val_loss": 0.601}),
    ("[Epoch 5/10] Train Loss: 0.3412 | Val Loss: 0.4012 | Val Acc: 0.8812\n",
     {"loss": 0.3412, "val_loss": 0.4012, "val_acc": 0.8812}),
    ("Iter 590: Train loss 1.100, Learning Rate 2.000e-05, It/sec 0.8\nIter 600: Val loss 1.300, Val took 5.265s\n",
     {"loss": 1.1, "val_loss": 1.3, "lr": 2e-05}),
    ("Epoch 3: eval loss 0.25, test acc 0.91, loss 0.2\n", {"eval_loss": 0.25, "test_acc": 0.91, "loss": 0.2}),
])
def test_a_split_word_before_a_measure_names_another_series(text: str, expected: dict[str, float],
                                                              tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    log.write_text(text)
    metrics = summarize(log, write=False)["metrics"]
    assert {k: metrics[k]["last"] for k in expected if k in metrics} == pytest.approx(expected)


@pytest.mark.parametrize("end", ["Saved final weights to adapters/adapters.safetensors.",
                                 "saving the final model ..."])
def test_a_trainers_word_that_it_saved_the_final_model_is_the_end(end: str) -> None:
    inferred = infer_end(f"Iter 600: Train loss 1.050, Learning Rate 1.000e-05\n{end}\n")
    assert inferred is not None and inferred[0] == "COMPLETED"
    assert infer_end("Iter 600: Train loss 1.050\nSaving model checkpoint to out/checkpoint-600\n") is None


def test_a_capitalised_epoch_is_the_epoch(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    log.write_text("Epoch 1 | train loss: 0.512\nEpoch 2 | train loss: 0.402\n")
    metrics = summarize(log, write=False)["metrics"]
    assert metrics["epoch"]["last"] == 2 and "Epoch" not in metrics


@pytest.mark.parametrize(("text", "state", "kind", "words"), [
    ("slurmstepd: error: Job 123 exceeded memory limit (26214400 > 25600000), being killed\n"
     "slurmstepd: error: Exceeded job memory limit\n", "FAILED", "host_oom", "memory limit"),
    ("Evicted: The node was low on resource: memory. Container trainer was using 61Gi, which exceeds its request of "
     "32Gi.\n", "FAILED", "host_oom", "low on resource: memory"),
    ("srun: error: Node failure on n12\nsrun: Job step aborted: Waiting up to 32 seconds for job step to finish.\n",
     "NODE_FAIL", "node_fail", "n12"),
    ("srun: error: Unable to allocate resources: Requested node configuration is not available\n", "FAILED", "setup",
     "Requested node configuration is not available"),
    ("sbatch: error: Batch job submission failed: Invalid account or account/partition combination specified\n",
     "FAILED", "setup", "Invalid account"),
    ("Epoch 3:  40%|####      | 40/100 [00:10<00:15, 4.0it/s, loss=0.3]\n"
     "Detected KeyboardInterrupt, attempting graceful shutdown...\n", "CANCELLED", "cancelled", "KeyboardInterrupt"),
])
def test_a_schedulers_or_trainers_own_words_about_the_end(text: str, state: str, kind: str, words: str,
                                                          tmp_path: Path) -> None:
    from gputrain.logs.verdict import choose

    inferred = infer_end(text)
    root = choose(scan(text))
    assert inferred is not None and inferred[0] == state
    assert root is not None and root.kind == kind and words in root.headline
    log = tmp_path / "x.log"
    log.write_text(text)
    summary = summarize(log, write=False)
    assert summary["state"] == state and summary["cause"] == kind  # an end the log shows has its cause too


@pytest.mark.parametrize(("text", "state", "kind", "words"), [
    # JAX/XLA on a GPU: the runtime's glog line is all there is (no Python traceback after it)
    ("E0101 12:00:00.000123 1234 pjrt_stream_executor_client.cc:2985] Execution of replica 0 failed: "
     "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 17179869184 bytes.\n", "FAILED", "device_oom",
     "RESOURCE_EXHAUSTED"),
    # a fatal (F) line: glog aborts the process after it, whatever it says
    ("[rank0]: F0101 12:00:00.000123 1234 collective_ops.cc:88] Check failed: num_devices == 8 (4 vs. 8)\n",
     "FAILED", "exception", "Check failed: num_devices == 8"),
])
def test_a_cxx_librarys_fatal_glog_line_ends_the_job(text: str, state: str, kind: str, words: str,
                                                      tmp_path: Path) -> None:
    from gputrain.logs.verdict import choose

    root = choose(scan(text))
    assert root is not None and root.kind == kind and words in root.headline
    log = tmp_path / "x.log"
    log.write_text(text)
    summary = summarize(log, write=False)
    assert summary["state"] == state and summary["cause"] == kind


def test_routine_glog_error_lines_are_not_a_failure() -> None:
    """TensorFlow/XLA print E lines at every start (factory registration, NUMA): no status code, no event."""
    text = ("E0000 00:00:1712345678.123456 4242 cuda_dnn.cc:8310] Unable to register cuDNN factory: Attempting to "
            "register factory for plugin cuDNN when one has already been registered\n"
            "E0101 12:00:00.000123 1234 numa.cc:10] could not open file to read NUMA node\n")
    assert scan(text) == []
