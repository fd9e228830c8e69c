"""The mechanisms the ``wild11`` field logs (and #30's round-10 leftovers) showed missing, one per test, on lines of
the shapes those logs have and their siblings' wordings: each a rule about words every tool of a kind prints, not
about one log.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gputrain.doctor import prescribe
from gputrain.logs.prefixes import normalize
from tests.support.field_logs import summary_of_text as _summary


@pytest.mark.parametrize("line", [
    "torch.distributed.DistStoreError: Timed out after 1801 seconds waiting for clients. 1/3 clients joined.",
    "torch.distributed.DistNetworkError: The client socket has timed out after 600000ms while trying to connect to "
    "(172.17.0.9, 46229).",
    "torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError: ",
    "RuntimeError: connect() timed out. Original timeout was 60000 ms.",
    "torch.distributed.DistNetworkError: The server socket has failed to listen on any local network address. "
    "port: 29500, useIpv6: 0, code: -98, name: EADDRINUSE, message: address already in use",
    # probing older torch's wordings of the same failure
    "RuntimeError: Timed out initializing process group in store based barrier on rank: 0, for key: "
    "store_based_barrier_key:1 (world_size=2, worker_count=1, timeout=0:30:00)",
    "ValueError: Error initializing torch.distributed using env:// rendezvous: environment variable MASTER_ADDR "
    "expected, but not set",
])
def test_a_rendezvous_or_store_timeout_is_a_distributed_set_up_failure_with_its_own_remedy(line: str,
                                                                                           tmp_path: Path) -> None:
    summary = _summary(line, tmp_path)
    remedy = prescribe(summary, None)
    assert summary["state"] == "FAILED" and summary["root_cause"]["kind"] == "dist_setup", summary["failure"]
    assert remedy is not None and "rendezvous" in remedy.text and "every node" in remedy.text


def test_c10s_cxx_exception_report_is_read_by_its_message_above_exception_raised_from(tmp_path: Path) -> None:
    text = ("[E521 15:43:02.707888867 TCPStore.cpp:318] [c10d] TCP client failed to connect/validate to host "
            "10.0.0.4:37907 - timed out (try=1, timeout=600000ms)\n"
            "Exception raised from throwTimeoutError at /pytorch/torch/csrc/distributed/c10d/socket.cpp:1025 (most "
            "recent call first):\n"
            "frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x96 (0x7f3c174611b6 in libc10.so)")
    summary = _summary(text, tmp_path)
    assert summary["state"] == "FAILED", summary["state"]
    assert summary["failure"].startswith("TCP client failed to connect"), summary["failure"]  # "[c10d] " taken off
    assert summary["root_cause"]["kind"] == "dist_setup"
    # a message an event above has read already is not read twice (the NCCL watchdog keeps its own headline)
    watchdog = ("[rank1]:[E ProcessGroupNCCL.cpp:563] [Rank 1] Watchdog caught collective operation timeout: "
                "WorkNCCL(SeqNum=7, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600011 "
                "milliseconds before timing out.\n"
                "Exception raised from checkTimeout at ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:565")
    assert _summary(watchdog, tmp_path)["root_cause"]["kind"] == "nccl_timeout"


@pytest.mark.parametrize("line", [
    "RuntimeError: CUDA error: CUBLAS_STATUS_NOT_INITIALIZED when calling `cublasCreate(handle)`",
    "RuntimeError: cuDNN error: CUDNN_STATUS_NOT_INITIALIZED",
    # probing TensorFlow's wordings of the same failure (an INTERNAL_ERROR at handle creation is no kernel fault)
    "2020-01-16 10:59:47.148243: E tensorflow/stream_executor/cuda/cuda_dnn.cc:329] Could not create cudnn handle: "
    "CUDNN_STATUS_INTERNAL_ERROR\n"
    "tensorflow.python.framework.errors_impl.UnknownError: Failed to get convolution algorithm. This is probably "
    "because cuDNN failed to initialize, so try looking to see if a warning log message was printed above.",
])
def test_a_math_library_that_could_not_initialise_is_named_with_its_usual_cause_memory(line: str,
                                                                                      tmp_path: Path) -> None:
    summary = _summary(line, tmp_path)
    remedy = prescribe(summary, None)
    assert summary["root_cause"]["kind"] == "cuda_init"
    assert "out of GPU memory" in summary["failure"], summary["failure"]
    assert remedy is not None and "memory" in remedy.text and "nvidia-smi" in remedy.text


def test_a_math_librarys_alloc_failure_is_a_cuda_oom(tmp_path: Path) -> None:
    summary = _summary("RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
                       tmp_path)
    assert summary["root_cause"]["kind"] == "cuda_oom", summary["root_cause"]["kind"]


@pytest.mark.parametrize(("raw", "text"), [
    ("vllm-1  | ERROR 11-18 18:07:28 engine.py:366] ValueError: x", "ValueError: x"),  # compose + vLLM < 0.7
    ("trainer_1 | Traceback (most recent call last):", "Traceback (most recent call last):"),
    ("INFO 04-27 10:13:05 llm_engine.py:275] # GPU blocks: 0", "# GPU blocks: 0"),
    ("epoch 1 | loss 0.5", "epoch 1 | loss 0.5"),  # a metric line with a pipe keeps its words
])
def test_docker_composes_service_column_and_old_vllm_log_prefix_come_off(raw: str, text: str) -> None:
    assert normalize(raw)[1] == text


@pytest.mark.parametrize("line", [
    "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
    "initializing the engine.",
    "ValueError: To serve at least one request with the models's max seq len (32768), (4.00 GiB KV cache) is "
    "needed, which is larger than the available KV cache memory (1.20 GiB). Try increasing `gpu_memory_utilization`"
    " or decreasing `max_model_len` when initializing the engine.",
    "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.",
    "ValueError: Free memory on device (30.1/79.1 GiB) on startup is less than desired GPU memory utilization (0.9, "
    "71.2 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.",
])
def test_an_inference_engine_with_no_memory_left_for_its_kv_cache_gets_the_engines_levers(line: str,
                                                                                         tmp_path: Path) -> None:
    summary = _summary(line, tmp_path)
    remedy = prescribe(summary, None)
    assert summary["root_cause"]["kind"] == "kv_cache"
    assert remedy is not None and "gpu_memory_utilization" in remedy.text and "max_model_len" in remedy.text


@pytest.mark.parametrize("line", [
    "OSError: We couldn't connect to 'https://huggingface.co' to load this file, couldn't find it in the cached "
    "files and it looks like bert-base-uncased is not the path to a directory containing a file named config.json.",
    "huggingface_hub.utils._errors.LocalEntryNotFoundError: Connection error, and we cannot find the requested files "
    "in the disk cache. Please try again or make sure your Internet connection is on.",
])
def test_a_download_with_no_network_says_to_fetch_beforehand_and_run_offline(line: str, tmp_path: Path) -> None:
    summary = _summary(line, tmp_path)
    remedy = prescribe(summary, None)
    assert summary["root_cause"]["kind"] == "network"
    assert remedy is not None and "HF_HUB_OFFLINE=1" in remedy.text


def test_ncclss_own_warning_that_its_network_transport_failed_is_the_root_not_what_follows(tmp_path: Path) -> None:
    text = ("gpu5:35917:35994 [0] transport/net_ib.cu:788 NCCL WARN NET/IB : Got completion with error 12, opcode 1, "
            "len 0, vendor err 129\n"
            "gpu5:35917:35994 [0] NCCL INFO transport/net.cu:537 -> 2\n"
            "gpu5:35917:35917 [1] init.cu:194 NCCL WARN Cuda failure 'an illegal memory access was encountered'")
    summary = _summary(text, tmp_path)
    assert summary["state"] == "FAILED" and "NET/IB" in summary["failure"], summary["failure"]
    remedy = prescribe(summary, None)
    assert remedy is not None and "fabric" in remedy.text and "NCCL_IB_DISABLE=1" in remedy.text, remedy
    benign = _summary("n1:7:7 [0] NCCL WARN NET/Plugin : Plugin load (libnccl-net.so) returned 2 : libnccl-net.so: "
                      "cannot open shared object file\n{'loss': 0.5, 'epoch': 1.0}", tmp_path)
    assert benign["failure"] is None, benign["failure"]  # no error word: NCCL falls back to its own transport


@pytest.mark.parametrize(("lines", "alert"), [
    (["Gradient overflow. Skipping step, loss scaler 0 reducing loss scale to 5.103203814961955e-203"], "diverged"),
    (["[INFO] [fused_optimizer.py:316:_update_scale] Reducing dynamic loss scale from 1 to 1"], "stuck"),
    (["[Rank 0] Overflow detected. Skipping step. Attempted loss scale: 1, reducing to 1"], "stuck"),
    (["[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 65536, reducing to 32768"], None),
    (["Reducing dynamic loss scale from 2 to 1"], None),  # one step down to 1 is not yet its floor
    (["NOTE: overflow detected, setting loss scale to: 0.000244140625"], None),  # fairseq probing, above fp16's tiny
])
def test_a_loss_scale_at_its_floor_or_below_fp16s_range_is_a_headline(lines: list[str], alert: str | None,
                                                                      tmp_path: Path) -> None:
    summary = _summary("\n".join(["{'loss': 2.5, 'epoch': 0.1}", *lines]), tmp_path)
    alerts = summary["alerts"]
    assert (alert in " ".join(alerts)) if alert else not alerts, alerts


@pytest.mark.parametrize("line", [
    "RuntimeError: One of the subprocesses has abruptly died during map operation.To debug the error, disable "
    "multiprocessing.",
    "concurrent.futures.process.BrokenProcessPool: A process in the process pool was terminated abruptly while the "
    "future was running or pending.",
])
def test_a_pool_worker_that_vanished_mid_task_is_most_often_the_host_oom_killer(line: str, tmp_path: Path) -> None:
    summary = _summary("Map (num_proc=64):  37%|###7      | 3700/10000 [00:41<01:10, 89.2 examples/s]\n" + line,
                       tmp_path)
    remedy = prescribe(summary, None)
    assert summary["root_cause"]["kind"] == "host_oom" and "OOM killer" in summary["failure"], summary["failure"]
    assert remedy is not None and "host memory" in remedy.text
