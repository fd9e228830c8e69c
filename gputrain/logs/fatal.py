"""The fatal events of a log that someone else's job wrote: one mechanism, not a list of special cases.

Every line of the log's tail is first stripped of what launchers, loggers and viewers put in front of it
(:func:`gputrain.logs.prefixes.normalize`), then read for the events that end a job:

- an exception line (``torch.OutOfMemoryError: CUDA out of memory…``, ``ray.exceptions.RayTaskError(OSError):
  ray::TaskRunner.run()``, ``Exception: Current loss scale already at minimum``) — wherever it is in a
  traceback, so a Ray task's cause line counts, not ``raise value.as_instanceof_cause()``; its kind comes from
  words every framework uses (out of memory, allocate, OOM, ResourceExhausted, loss scale), not one library's;
- what a scheduler or launcher says about the job (``*** JOB 12 ON n1 CANCELLED AT … DUE TO TIME LIMIT ***``,
  ``Detected 1 oom-kill event``, ``srun: error: n1: task 0: Killed``, torchrun's ``failed (exitcode: -9)
  local_rank: 3`` and its "Root Cause" box, PBS/LSF limits, the shell's ``Killed``, a segfault), NCCL watchdog
  timeouts, vLLM's ``EngineCore encountered a fatal error``;
- a CUDA fault wherever a line reports it (a logger's ``<class 'RuntimeError'> … - CUDA error: an illegal memory
  access``, a kernel's ``Assertion `srcIndex < srcSelectDimSize` failed.`` printed onto a progress bar, the NCCL
  watchdog's ``terminated with exception: CUDA error: uncorrectable ECC error``), an exception quoted inside another
  message (``raised the following async exception: NCCL error: …``), a framework's word that a worker died.

Kinds come from words, checked in this order: a full disk (``No space left on device``, ``Disk quota exceeded``,
``file write failed``: TensorFlow reports a full disk as ``ResourceExhaustedError``, which is not memory), a GPU
hardware fault (ECC, Xid, "fallen off the bus"), a CUDA kernel fault (illegal memory access, device-side assert),
then out of memory.

An exception that is the echo of another rank's failure (gloo "Connection closed by peer", SIGTERM sent by the
launcher, ``ChildFailedError``, accelerate's ``CalledProcessError``, vLLM's ``EngineDeadError`` "see above") is a
consequence; an event the same rank trained on after is ``recovered``. :mod:`gputrain.logs.verdict` picks the root.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gputrain.logs.classify import classify_line
from gputrain.logs.prefixes import normalize

_EXC_RE = re.compile(
    r"^(?P<name>(?:[A-Za-z_]\w*\.)*(?:[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt|Failure|Fault|Failed|Expired|"
    r"Unsupported)|Exception|StopIteration)"
    r"(?:\([\w.]+\)|\s+\([^()]{0,60}\))?)(?::\s*(?P<message>.*))?$"
)
#: An exception known by where it is defined rather than by its name's ending: a class after a module path in lower
#: case (``torch._dynamo.exc.FailOnRecompileLimitHit``, ``triton.runtime.autotuner.OutOfResources``), as Python's
#: traceback prints it, followed by its message.
_MODULE_EXC_RE = re.compile(r"^(?P<name>(?:[a-z_][a-z0-9_]*\.){2,}[A-Z][A-Za-z0-9]+)(?::\s+(?P<message>.*)|:)$")
_SLURM_RE = re.compile(
    r"\*\*\* (?P<what>JOB|STEP) (?P<id>\S+) (?:ON (?P<host>\S+) )?CANCELLED AT (?P<at>\S+)"
    r"(?: DUE TO (?P<reason>[A-Z ]+?))?(?:, [A-Z ]+)?(?: on \S+)? \*\*\*"
)
#: Why slurmstepd cancelled a job or step ("DUE TO NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS"). TASK FAILURE
#: (Slurm 23.02+: one task of the step failed and ``--kill-on-bad-exit`` ended the rest) is no verdict of the
#: scheduler's own: it is the launcher's account of a task's failure, read after the task's own words.
_SLURM_REASONS = {"TIME LIMIT": ("time_limit", "TIMEOUT"), "PREEMPTION": ("preempted", "PREEMPTED"),
                  "NODE FAILURE": ("node_fail", "NODE_FAIL"), "TASK FAILURE": ("task_failure", "FAILED")}
_OOM_KILL_RE = re.compile(r"Detected (\d+) oom[-_]kill event", re.IGNORECASE)
_SRUN_TASK_RE = re.compile(r"srun: error: (?P<host>\S+): tasks? (?P<tasks>[\d,-]+): (?P<how>.+)$")
_ELASTIC_RE = re.compile(r"failed \(exitcode: (?P<code>-?\d+)\) local_rank: (?P<rank>\d+)")
_BOX_RE = re.compile(r"rank\s*:\s*(?P<rank>\d+)[^\n]*\n\s*exitcode\s*:\s*(?P<code>-?\d+)")
_BOX_HOST_RE = re.compile(r"host\s*:\s*(\S+)")
_SIGNAL_RE = re.compile(r"Signal (\d+) \((SIG[A-Z]+)\) received by PID (\d+)")
_KILLED_RE = re.compile(r"^(?:Killed|.*line \d+:\s+\d+ Killed(?:\s+.*)?)$")
#: A shell's report that the job it ran died of a signal, in each shell's words: zsh's "zsh: killed  python …" and
#: its job table "[1]  24608 abort  python …", bash's "line 1:  2741 Bus error (core dumped) python …" and "[1]+
#: Killed  python …", macOS's "Killed: 9". (bash's "line N: PID Killed" is :data:`_KILLED_RE`'s, read first.)
_SHELL_DEATH_RE = re.compile(
    r"^(?:zsh: |.*\bline \d+:\s+\d+\s+|\[\d+\][+-]?\s+(?:\d+\s+)?|\d+\s+(?=\w+(?: \w+)*\s{2,}\S))"
    r"(?P<how>killed|abort(?:ed)?|segmentation fault|bus error|terminated|illegal (?:hardware )?instruction|"
    r"floating point exception)(?:\s+\(core dumped\))?(?:\s+\S.*)?$|^Killed: (?P<number>\d+)$",
    re.IGNORECASE)
_SHELL_SIGNALS = {"killed": 9, "abort": 6, "aborted": 6, "segmentation fault": 11, "bus error": 7, "terminated": 15,
                  "illegal instruction": 4, "illegal hardware instruction": 4, "floating point exception": 8}
_DS_LAUNCHER_RE = re.compile(r"exits with return code = (-?\d+)")
#: torch elastic's agent got a signal itself and stops its workers ("Received 1 death signal, shutting down
#: workers"; newer versions print the enum: "Received Signals.SIGHUP death signal").
_DEATH_SIGNAL_RE = re.compile(r"Received (?:Signals\.)?(?P<sig>SIG[A-Z]+|\d+) death signal")
_WATCHDOG_RE = re.compile(r"\[Rank (\d+)\]\s*Watchdog caught collective operation timeout")
_VLLM_FATAL = "EngineCore encountered a fatal error"
#: torch's NCCL heartbeat monitor: the watchdog itself hung, and the process is killed after a debug dump.
_HEARTBEAT = "Heartbeat monitor timed out"
#: slurmstepd gave up on processes that did not die when signalled (stuck in uninterruptible I/O, most often).
_STEPD_TERMINATED_RE = re.compile(r"\*\*\* (?:JOB|STEP) \S+ STEPD TERMINATED ON (?P<host>\S+) AT \S+ DUE TO JOB NOT "
                                  r"ENDING WITH SIGNALS \*\*\*")
#: A glog/absl line at severity E or F (``E0101 12:00:00.000123  1234 file.cc:42] message``): how XLA, JAX,
#: TensorFlow, gRPC and Abseil-based C++ report, often with no Python exception after it. An F line is fatal by
#: definition (the process aborts after it); an E line counts only with an absl status code in it
#: (``failed: RESOURCE_EXHAUSTED: Out of memory ...``): plain E lines are routine noise in these libraries.
_GLOG_RE = re.compile(r"(?:^|[\]:\s])(?P<severity>[EF])\d{4} \d\d:\d\d:\d\d\.\d+\s+\d+\s+\S+:\d+\]")
_ABSL_STATUS_RE = re.compile(r"\b(?:RESOURCE_EXHAUSTED|INTERNAL|UNAVAILABLE|DEADLINE_EXCEEDED|ABORTED|"
                             r"FAILED_PRECONDITION|DATA_LOSS|OUT_OF_RANGE|UNIMPLEMENTED|PERMISSION_DENIED): ")
#: TensorFlow's/XLA's own C++ log line after its timestamp (``2020-01-01 12:00:00.123456: E tensorflow/stream_executor/
#: cuda/cuda_dnn.cc:329] Could not create cudnn handle: …``): fatal at F; at E only where its words name a known
#: failure (memory, a handle, a disk) or carry an absl status. The Python exception after it often just points back
#: here ("… printed above").
_CXX_LOG_RE = re.compile(r"^(?P<severity>[EF]) [^\s\]]+\.(?:cc|cpp|h):\d+\] (?P<message>\S.*)$")
_HYDRA_FATAL = "Error executing job with overrides"
#: An exception written as its Python ``repr`` after a word that the run ended on it: wandb's sweep agent says
#: "Run 7xk2 errored: OSError(28, 'No space left on device')"; the same shape as "failed with RuntimeError('…')".
_REPR_EXC_RE = re.compile(r"\b(?:errored|crashed|failed|aborted)(?: with)?:?\s+(?P<name>(?:[A-Za-z_]\w*\.)*[A-Z]\w*"
                          r"(?:Error|Exception|Interrupt|Exit|Failure))\((?P<args>.*)\)\s*$")
#: C++'s last words: "terminate called after throwing an instance of 'std::bad_alloc'", then "  what():  …"
#: (libstdc++); libc++ (macOS, clang) says it in one line: "libc++abi: terminating due to uncaught exception of
#: type std::runtime_error: …" ("terminating with uncaught exception of type …" in older versions).
_TERMINATE_RE = re.compile(r"terminate called after throwing an instance of '(?P<name>[^']+)'")
_LIBCXX_TERMINATE_RE = re.compile(r"^libc\+\+abi(?:\.dylib)?: terminating (?:due to|with) uncaught exception of type "
                                  r"(?P<name>\S+?)(?::\s+(?P<what>.*))?$")
_WHAT_RE = re.compile(r"what\(\):\s*(?P<what>.*)")
#: The C++ runtime's own last words when it aborts with no exception to name: a virtual call on an object being
#: destroyed (most often a library's teardown at exit), ``std::terminate`` with nothing thrown, a terminate inside
#: a terminate. The SIGABRT that follows (torchrun's exit code -6) is their echo.
_CXX_ABORTS = ("pure virtual method called", "terminate called without an active exception",
               "terminate called recursively")
_CXX_LAST_WORDS = ("terminate called", "libc++abi", *_CXX_ABORTS)
#: The child's end an echo carries (Python's ``CalledProcessError``: "returned non-zero exit status -11").
_EXIT_STATUS_RE = re.compile(r"non-zero exit status (-?\d+)|died with <Signals\.SIG[A-Z]+: (\d+)>")
#: Windows' NTSTATUS codes a crashed process exits with (3221225477 = 0xC0000005).
_WINDOWS_STATUS = {0xC0000005: "access violation", 0xC00000FD: "stack overflow", 0xC0000409: "stack buffer overrun",
                   0xC000001D: "illegal instruction"}
#: An exit code as a container runtime, CI or an IDE reports it ("Exited with code 137", "exit code 137").
_EXIT_CODE_RE = re.compile(r"\bexit(?:ed)? with (?:exit )?code (-?\d+)|\bexit (?:code|status):? (-?\d+)", re.IGNORECASE)
#: Other schedulers' verdicts (PBS/Torque, LSF): the same facts as Slurm's, in their words.
_OTHER_LIMITS = (
    (re.compile(r"walltime \S+ exceeded limit|TERM_RUNLIMIT|job killed: walltime|exceeded (?:hard )?wall ?clock "
                r"(?:limit|time)", re.IGNORECASE), "time_limit", "TIMEOUT",
     "the scheduler stopped the job at its time limit"),
    # LSF, PBS, Slurm's slurmstepd before cgroup OOM events ("Job 12 exceeded memory limit (… > …), being killed"),
    # Kubernetes' eviction ("The node was low on resource: memory")
    (re.compile(r"TERM_MEMLIMIT|job killed: mem \S+ exceeded limit|[Ee]xceeded (?:job |step )?memory limit|"
                r"low on resource: memory"), "host_oom", "FAILED", "the scheduler killed the job at its memory limit"),
)
#: Slurm's own words that a node died under a step, or that it refused the job before it ran (with its reason).
_SRUN_NODE_FAIL_RE = re.compile(r"^srun: error: Node failure on (?P<host>\S+)")
_REFUSED_RE = re.compile(r"^(?:srun|sbatch|salloc): error: (?:Unable to allocate resources|Batch job submission failed|"
                         r"Unable to create step for job \d+|task \d+ launch failed)"
                         r": (?P<reason>.+)$")
#: torch's DataLoader worker reports its own crash before the main process raises ("ERROR: Unexpected
#: segmentation fault encountered in worker."; a bus error there is a full /dev/shm most often).
_WORKER_CRASH_RE = re.compile(r"Unexpected (?P<how>segmentation fault|bus error|floating point exception) "
                              r"encountered in worker", re.IGNORECASE)
_CRASH_RE = re.compile(r"(?:^|\s)(Segmentation fault|Bus error|Aborted|Illegal instruction|Floating point exception)"
                       r"(?: \(core dumped\))?\s*$|^Fatal Python error: ")
#: Exceptions that echo another rank's (or process's) failure rather than cause one.
_CONSEQUENCES = ("Connection closed by peer", "Connection reset by peer", "Broken pipe", "SIGTERM",
                 "See stack trace (above)", "returned non-zero exit status", "terminate called")
_CONSEQUENCE_NAMES = ("ChildFailedError", "CalledProcessError", "EngineDeadError")
#: A message that sends the reader to an earlier error ("Please inspect the previous error messages for a cause")
#: is an echo; what it lists as possible causes ("an error such as OOM") is no evidence of one.
_POINTS_BACK_RE = re.compile(r"\b(?:see|inspect|check)\b[^.]{0,40}?\b(?:above|previous|earlier)\b", re.IGNORECASE)
#: torch.save's zip writer says "PytorchStreamWriter failed writing file data/3: file write failed" (or, where the
#: write came back short, "unexpected pos 704 vs 598") when the disk or quota fills under a checkpoint; Python's
#: repr of the error is ``OSError(28, 'No space left on device')``.
_DISK_RE = re.compile(r"No space left on device|Disk quota exceeded|\[Errno (?:28|122)\]|\bENOSPC\b|StorageFull|"
                      r"file write failed|PytorchStreamWriter failed writing|unexpected pos \d+ vs \d+|"
                      r"\bOSError\((?:28|122), ", re.IGNORECASE)
#: The CUDA stack does not fit the machine: the driver older than the runtime a build needs, no driver at all, no
#: kernel for this GPU's architecture in the build, CUDA libraries not found (bitsandbytes' "CUDA Setup failed").
_CUDA_SETUP_RE = re.compile(r"driver on your system is too old|CUDA driver version is insufficient|"
                            r"Found no NVIDIA driver|no kernel image is available for execution|"
                            r"CUDA Setup failed|libcu\w*\.so[\w.]*: cannot open shared object file|"
                            r"not compatible with the current PyTorch installation", re.IGNORECASE)
#: The data loader's workers share tensors through /dev/shm: when it is full they die of SIGBUS.
#: A GPU kernel that asks for more on-chip resources per block than the GPU has (Triton's "out of resource: shared
#: memory", CUDA's "too many resources requested for launch"): not /dev/shm, not device memory.
_KERNEL_RESOURCES_RE = re.compile(r"out of resources?: (?:shared memory|registers)|too many resources requested for "
                                  r"launch|LAUNCH_OUT_OF_RESOURCES|cudaErrorLaunchOutOfResources", re.IGNORECASE)
_SHM_RE = re.compile(r"shared memory|\(shm\)|DataLoader worker.{0,60}Bus error", re.IGNORECASE)
_GPU_HARDWARE_RE = re.compile(r"\bECC error|ECC_UNCORRECTABLE|fallen off the bus|\bXid\b", re.IGNORECASE)
_CUDA_FAULT_RE = re.compile(r"illegal memory access|device-side assert triggered|misaligned address|"
                            r"unspecified launch failure|"
                            r"illegal instruction was encountered|cudaErrorIllegalAddress|"
                            r"(?:CUBLAS|CUDNN)_STATUS_(?:EXECUTION_FAILED|INTERNAL_ERROR|MAPPING_ERROR)", re.IGNORECASE)
#: The processes of a distributed job never met: a node could not reach the rendezvous store (torch elastic's
#: ``RendezvousTimeoutError``/``RendezvousConnectionError``, c10d's ``DistNetworkError: The client socket has timed
#: out``, ``DistStoreError: Timed out … waiting for clients. 1/3 clients joined``), or the store's port was taken.
#: Nothing trained yet: the endpoint, the port or a node that never started is the cause, not the training code.
_DIST_SETUP_RE = re.compile(r"\bRendezvous(?:Timeout|Connection)Error|\bDistStoreError|\bDistNetworkError|"
                            r"client socket has timed out|waiting for (?:clients|workers)\b|connect\(\) timed out|"
                            r"TCP client failed to connect|server socket has failed to (?:listen|bind)|"
                            r"\bSocket Timeout\b|Timed out initializing process group|"
                            r"Error initializing torch\.distributed", re.IGNORECASE)
#: cuBLAS/cuDNN could not create their handle (``CUBLAS_STATUS_NOT_INITIALIZED when calling cublasCreate``;
#: TensorFlow's "Could not create cudnn handle: CUDNN_STATUS_INTERNAL_ERROR", "cuDNN failed to initialize"): the
#: library allocates its workspace then, so a GPU already full (this process's cache, another process) is the
#: usual cause; a CUDA stack that does not fit the machine the other. ALLOC_FAILED says the memory part outright.
_CUDA_INIT_RE = re.compile(r"(?:CUBLAS|CUDNN)_STATUS_NOT_INITIALIZED|Could not create cudnn handle|"
                           r"cuDNN failed to initialize|when calling `?cublasCreate", re.IGNORECASE)
_CUDA_ALLOC_RE = re.compile(r"(?:CUBLAS|CUDNN|CUSOLVER|CUFFT)_STATUS_ALLOC_FAILED")
#: An inference engine's start-up memory budget (vLLM's ``gpu_memory_utilization``, SGLang's
#: ``--mem-fraction-static``) left nothing for the KV cache once the weights were loaded.
_KV_CACHE_RE = re.compile(r"No available memory for the cache blocks|larger than the available KV cache memory|"
                          r"Insufficient memory for (?:the )?KV cache|Not enough memory\. Please try to increase "
                          r"--mem-fraction-static|is less than desired GPU memory utilization", re.IGNORECASE)
#: A model or data set fetched at start-up with no network to fetch it (the Hugging Face Hub's words; compute nodes
#: are often offline) and nothing in the local cache.
_NETWORK_RE = re.compile(r"couldn't connect to '?https?://|LocalEntryNotFoundError|cannot find the requested files "
                         r"in the (?:disk|local) cache|Max retries exceeded with url|Temporary failure in name "
                         r"resolution|Failed to resolve '", re.IGNORECASE)
#: A process pool's worker that vanished mid-task (HF datasets' ``map(num_proc=…)``: "One of the subprocesses has
#: abruptly died during map operation"; Python's ``BrokenProcessPool``: "terminated abruptly"): nothing of its own
#: was printed, which is how the host's OOM killer leaves a process (SIGKILL) — the usual cause with one worker per
#: core each holding a tokenizer and a shard.
POOL_DIED_RE = re.compile(r"subprocess(?:es)? (?:has|have) abruptly died|process in the process pool was terminated "
                          r"abruptly|\bBrokenProcessPool\b")
#: NCCL's own WARN line that its network transport failed (``NET/IB : Got completion with error 12``: the NICs
#: cannot reach each other; ``Call to ibv_create_qp failed``): what follows on the other ranks is its echo.
_NCCL_NET_RE = re.compile(r"NCCL WARN (?P<what>NET/\w+\s*:.*\b(?:error|failed|failure)\b.*|Call to ibv_\w+ failed.*)$")
#: c10's C++ exception report: its message, then "Exception raised from checkTimeout at …/socket.cpp:1025 (most
#: recent call first):" and the C++ frames (the Python exception, when one follows, is often cut off a paste).
_C10_RAISED = "Exception raised from "
_TAG_RE = re.compile(r"^(?:\[[\w ]+\]\s*)+")  # "[c10d] ", "[Rank 0] " before a C++ message
#: Where a line reports a CUDA fault outside an exception line (a logger's own format, a kernel's assert).
_CUDA_IN_LINE_RE = re.compile(r"CUDA error: .*|CUDA_ERROR_\w+.*|\bcudaError\w+.*")
_ASSERT_RE = re.compile(r"[Aa]ssertion `[^`']{1,200}[`'](?: failed\.?)?")  # CUDA's `x`, ROCm's `x'
#: A warning is not fatal by definition (c10's "Warning: CUDA warning: driver shutting down" at teardown).
_WARNING_RE = re.compile(r"\b[Ww]arning:")
#: "… raised the following async exception: NCCL error: …", "… terminated with exception: …".
_QUOTED_EXC_RE = re.compile(r"\bexception: (?P<message>\S.*)$", re.IGNORECASE)
#: A framework's word that a worker process died (Ray: "A worker died or was killed while executing a task").
_DIED_RE = re.compile(r"\b(?:worker|process|actor)\b[^.]{0,40}?\b(?:died|was killed|exited unexpectedly)\b",
                      re.IGNORECASE)
OOM_KINDS = ("cuda_oom", "device_oom", "host_oom")


@dataclass
class Fatal:
    """One event that can end a job, with where it was seen (line index in the text read)."""

    kind: str  # cuda_oom, device_oom, host_oom, time_limit, cancelled, preempted, node_fail, exception,
    #            nccl_timeout, vllm_engine, fp16_overflow, signal, exit_code, disk_full, gpu_hardware, cuda_error,
    #            process_died, shm, kernel_resources, cuda_setup, cuda_init, kv_cache, dist_setup, network
    headline: str
    line: int
    rank: int | None = None
    host: str | None = None
    exception: str | None = None
    message: str | None = None
    group: str = "worker"  # verdict, worker, launcher, consequence
    recovered: bool = False  # training went on after it (a caught error printed, a warning with a traceback)
    state: str = "FAILED"  # the end state this event shows
    evidence: str = ""


_OOM_RE = re.compile(r"out of memory|OutOfMemory|\bOOM\b|ResourceExhausted|RESOURCE_EXHAUSTED|Resource exhausted|"
                     r"(?:cannot|can't|failed to) allocate|MemoryError|bad_alloc", re.IGNORECASE)
#: Words that put an out-of-memory on the host, not the accelerator: Python's own MemoryError family (numpy's
#: ``_ArrayMemoryError``; an ``OutOfMemoryError`` is a framework's, often the GPU's), a node or system low on memory
#: (Ray's ``OutOfMemoryError: Task was killed due to the node running low on memory``).
_HOST_MEMORY_RE = re.compile(r"\bCPU\b|CPUAllocator|^MemoryError|^(?:[\w.]+\.)?_?(?<!OutOf)\w*(?<!OutOf)MemoryError:|"
                             r"Cannot allocate memory|host memory|std::bad_alloc|"
                             r"\b(?:node|system|machine)\b[^.]{0,40}?\b(?:low on|out of) memory|\bRAM\b")


#: the first of these whose words an exception shows names its cause; the order settles overlaps (a CUDA handle
#: that was never made, ``cuda_init``, ran no kernel, so it comes before the faults and the OOMs)
_KINDS_BY_WORDS: tuple[tuple[re.Pattern[str], str], ...] = (
    (_DISK_RE, "disk_full"), (_CUDA_SETUP_RE, "cuda_setup"), (_GPU_HARDWARE_RE, "gpu_hardware"),
    (_KERNEL_RESOURCES_RE, "kernel_resources"), (_CUDA_INIT_RE, "cuda_init"), (_CUDA_FAULT_RE, "cuda_error"),
    (_CUDA_ALLOC_RE, "cuda_oom"), (_KV_CACHE_RE, "kv_cache"), (_DIST_SETUP_RE, "dist_setup"),
    (_NETWORK_RE, "network"),
)


def _kind_of(name: str, message: str, echo: bool = False) -> str:
    """The cause an exception shows, from words every framework uses (out of memory, allocate, OOM, loss
    scale), not from one library's message: CUDA's, XLA's, TensorFlow's and Paddle's OOMs all read as OOM.
    An ``echo`` (a message that points back to an earlier error) is read by its name only."""
    text = f"{name}: {message}" if not echo else name
    for pattern, kind in _KINDS_BY_WORDS:
        if pattern.search(text):
            return kind
    if "loss scale" in text.lower() or name.endswith("FloatingPointError"):
        return "fp16_overflow"
    if "EngineDeadError" in name:
        return "vllm_engine"
    if name.endswith("KeyboardInterrupt"):
        return "cancelled"
    if _SHM_RE.search(text):
        return "shm"
    if "DataLoader worker" in text and ("exited unexpectedly" in text or "Killed" in text):
        return "host_oom"
    if POOL_DIED_RE.search(text):
        return "host_oom"
    if _OOM_RE.search(text):
        if "CUDA" in text or "cuda" in name:
            return "cuda_oom"
        return "host_oom" if _HOST_MEMORY_RE.search(text) else "device_oom"
    return "nccl" if classify_line(text) == "nccl" else "exception"


def _exception(index: int, rank: int | None, text: str, following: str) -> Fatal | None:
    match = _EXC_RE.match(text) or _MODULE_EXC_RE.match(text)
    if match is None or match.group("name").endswith("Warning"):
        return None
    name, message = match.group("name"), (match.group("message") or "").strip()
    after = following.strip()
    if not message and after and not after.startswith(("Traceback", "File ", "^", "~")):
        message = after  # "torch.OutOfMemoryError:" with the message on the next line (indented or not)
    echo = bool(_POINTS_BACK_RE.search(message))
    consequence = echo or any(m in message for m in _CONSEQUENCES) or any(n in name for n in _CONSEQUENCE_NAMES)
    kind = _kind_of(name, message, echo)
    headline = f"{name}: {message[:200]}" if message else name
    if kind == "cancelled":
        headline = f"interrupted (Ctrl-C, SIGINT): {headline}"
    return Fatal(kind, headline, index, rank, exception=name, message=message,
                 group="consequence" if consequence else "worker", evidence=text[:500])


_LAST_SCAN: list[tuple[str, list[Fatal]]] = []  # the state inference and the root cause read the same tail


def scan(text: str) -> list[Fatal]:
    """Every fatal event in ``text`` (a log's tail), in log order."""
    if _LAST_SCAN and _LAST_SCAN[0][0] == text:
        return list(_LAST_SCAN[0][1])
    found = _scan(text)
    _LAST_SCAN[:] = [(text, found)]
    return list(found)


def _scan(text: str) -> list[Fatal]:
    raw = text.splitlines()
    lines = [normalize(line) for line in raw]
    out: list[Fatal] = []
    for index, (rank, line) in enumerate(lines):
        if not line or len(line) > 20000:
            continue
        first = line.lstrip()
        following = lines[index + 1][1] if index + 1 < len(lines) else ""
        if line[:1].isalpha():
            found = _exception(index, rank, line, following)
            if found is not None:
                out.append(found)
                status = _EXIT_STATUS_RE.search(found.message or "") if found.group == "consequence" else None
                if status:  # the echo still says how the child ended: that is the launcher's account
                    code = int(status.group(1)) if status.group(1) else -int(status.group(2))  # a signal: -N
                    out.append(_launcher_exit(index, rank, code, None, line))
                continue
        event = (_event(index, rank, first, following) or _glog_fatal(index, rank, raw[index], first)
                 or _cxx_log_fatal(index, rank, first))
        if event is None and first.startswith(_C10_RAISED) and index and not any(
                e.line >= index - 6 for e in out):  # a message no event above has read already
            event = _c10_raised(index, rank, lines[index - 1][1])
        if event is not None:
            out.append(event)
    out += _boxes(text, len(lines))
    _abort_echoes(out)
    _srun_teardown(out)
    if out:
        last = _last_progress(raw)
        for event in out:
            went_on = last.get(event.rank, -1) if event.rank is not None else max(last.values(), default=-1)
            event.recovered = event.line < went_on and event.group in ("worker", "consequence")
    return out


def _abort_echoes(events: list[Fatal]) -> None:
    """C++'s ``std::terminate`` ends the process with ``abort()``: the SIGABRT a shell or the crash line reports
    after a terminate line is its echo, and the exception it names is the cause."""
    thrown = next((e.line for e in events if e.evidence.startswith(_CXX_LAST_WORDS)), None)
    if thrown is None:
        return
    for event in events:
        aborted = "SIGABRT" in event.headline or "Abort" in event.headline
        if event.line > thrown and event.kind == "signal" and aborted:
            event.group = "consequence"


def _srun_teardown(events: list[Fatal]) -> None:
    """Once a task of a step has failed on its own (exited non-zero, or Slurm says the step ended "DUE TO TASK
    FAILURE"), srun kills the step's other tasks (``--kill-on-bad-exit``): their "Killed" is that teardown, not the
    host's OOM killer."""
    failed_at = next((e.line for e in events if e.kind == "task_failure"
                      or (e.kind == "exit_code" and e.evidence.startswith("srun: error:"))), None)
    if failed_at is None:
        return
    for event in events:
        if event.line > failed_at and event.kind == "host_oom" and event.evidence.startswith("srun: error:") \
                and event.evidence.rstrip().endswith("Killed"):
            event.kind, event.group = "signal", "consequence"
            event.headline = event.headline.split(" killed by")[0] + " killed by srun as it ended the failed step"


def _last_progress(lines: list[str]) -> dict[int | None, int]:
    """Per rank (None: lines without a rank prefix), the index of the last line where training went on: a
    metric record of a step not seen before (an HF dict, which carries no step, always counts; a bar redrawn at
    the same step, as tqdm does when an exception unwinds it, does not). Another rank's progress printed after
    a rank failed (buffered output of the survivors) does not make that rank's failure a recovered one."""
    from gputrain.logs.parse import parse_line

    best: dict[int | None, int] = {}
    last: dict[int | None, int] = {}
    for index, line in enumerate(lines):
        if not line.strip() or len(line) > 20000:
            continue
        record = parse_line(line)
        rank = record.rank
        if record.kind == "metrics" and record.step is None and record.fmt not in ("tqdm", "lightning"):
            last[rank] = index
        elif record.kind in ("metrics", "progress") and record.step is not None and record.step > best.get(rank, -1):
            best[rank], last[rank] = record.step, index
    return last


def _event(index: int, rank: int | None, line: str, following: str = "") -> Fatal | None:
    """A scheduler's, launcher's or library's own words about the end of a job (not an exception line)."""
    if "***" in line and "CANCELLED AT" in line:
        match = _SLURM_RE.search(line)
        if match:
            kind, state = _SLURM_REASONS.get((match.group("reason") or "").strip(), ("cancelled", "CANCELLED"))
            what = {"time_limit": "Slurm stopped the job at its time limit",
                    "preempted": "Slurm preempted the job", "node_fail": "a node of the job failed (Slurm)",
                    "task_failure": "Slurm ended the step because one of its tasks failed",
                    "cancelled": "the job was cancelled (scancel)"}[kind]
            host = match.group("host")
            if kind == "node_fail" and host:
                what = f"node {host} failed (Slurm NODE_FAIL)"
            return Fatal(kind, f"{what}: {match.group(0)}", index, host=host,
                         group="launcher" if kind == "task_failure" else "verdict", state=state, evidence=line[:500])
    low = line.lower()
    if "oom" in low or "out of memory" in low:
        match = _OOM_KILL_RE.search(line)
        if match:
            return Fatal("host_oom", f"out of host memory: killed by the OOM killer ({match.group(0)})", index, rank,
                         group="worker", evidence=line[:500])
        if "OOMKilled" in line or classify_line(line) == "host_oom":  # Kubernetes, the kernel's own line
            return Fatal("host_oom", f"killed by the host's OOM killer ({line.strip()[:200]})", index, rank,
                         evidence=line[:500])
    for pattern, kind, state, what in _OTHER_LIMITS:
        if pattern.search(line):
            return Fatal(kind, f"{what}: {line.strip()[:200]}", index, group="verdict" if state != "FAILED" else
                         "worker", state=state, evidence=line[:500])
    if "encountered in worker" in line:
        worker = _WORKER_CRASH_RE.search(line)
        if worker:
            kind = "shm" if _SHM_RE.search(line) else "signal"
            return Fatal(kind, f"a data loader worker crashed: {line.strip()[:200]}", index, rank, evidence=line[:500])
    crash = _CRASH_RE.search(line)
    if crash:
        return Fatal("signal", f"the process crashed: {line.strip()[:200]}", index, rank, evidence=line[:500])
    if line.startswith(("srun: error:", "sbatch: error:", "salloc: error:")):
        node = _SRUN_NODE_FAIL_RE.match(line)
        if node:
            return Fatal("node_fail", f"a node of the job failed: {node.group('host')} (srun: Node failure)", index,
                         host=node.group("host"), group="verdict", state="NODE_FAIL", evidence=line[:500])
        refused = _REFUSED_RE.match(line)
        if refused:
            what = "Slurm refused the job" if "rror: Unable to allocate" in line or "submission" in line else \
                "Slurm could not start the step"
            return Fatal("setup", f"{what}: {refused.group('reason')[:200]}", index, group="verdict",
                         state="FAILED", evidence=line[:500])
    if line.startswith("srun: error:"):
        match = _SRUN_TASK_RE.match(line)
        if match:
            how, where = match.group("how"), f"task {match.group('tasks')} on {match.group('host')}"
            if "Out Of Memory" in how:
                return Fatal("host_oom", f"{where} ran out of host memory (srun: Out Of Memory)", index,
                             host=match.group("host"), evidence=line)
            if how.startswith("Killed"):
                return Fatal("host_oom", f"{where} killed by SIGKILL, likely the host's OOM killer", index,
                             host=match.group("host"), group="launcher", evidence=line)
            if how.startswith("Terminated"):
                return Fatal("signal", f"{where} terminated (SIGTERM)", index, host=match.group("host"),
                             group="consequence", evidence=line)
            return Fatal("exit_code", f"{where}: {how}", index, host=match.group("host"), group="launcher",
                         evidence=line)
    if "local_rank:" in line:
        match = _ELASTIC_RE.search(line)
        if match:
            return _launcher_exit(index, int(match.group("rank")), int(match.group("code")), None, line)
    if "received by PID" in line:
        match = _SIGNAL_RE.search(line)
        if match:
            return _launcher_exit(index, rank, -int(match.group(1)), None, line)
    if "Killed" in line and _KILLED_RE.match(line):
        return Fatal("host_oom", "killed by SIGKILL (the shell says \"Killed\"), likely the host's OOM killer",
                     index, rank, group="launcher", evidence=line[:500])
    shell = _SHELL_DEATH_RE.match(line)
    if shell:
        number = shell.group("number")
        signal_number = int(number) if number else _SHELL_SIGNALS[shell.group("how").lower()]
        return _launcher_exit(index, rank, -signal_number, None, line)
    if "Watchdog caught" in line:
        match = _WATCHDOG_RE.search(line)
        if match:
            return Fatal("nccl_timeout", line[:300], index, int(match.group(1)), evidence=line[:500])
    if line.startswith(_CXX_ABORTS):
        return Fatal("signal", f"the C++ runtime aborted the process (SIGABRT): {line.strip()}", index, rank,
                     message=line.strip(), evidence=line[:500])
    if line.startswith(("terminate called after", "libc++abi")):
        thrown = _TERMINATE_RE.match(line) or _LIBCXX_TERMINATE_RE.match(line)
        if thrown:
            said = _WHAT_RE.search(following) if "what" not in thrown.groupdict() else None
            message = (said.group("what") if said else thrown.groupdict().get("what") or "").strip()
            name = thrown.group("name")
            kind = _kind_of(name, message)
            # an unknown C++ exception at exit is most often the echo of an error already reported above
            return Fatal(kind, f"{name}: {message[:200]}" if message else name, index, rank, exception=name,
                         message=message, group="worker" if kind != "exception" else "consequence",
                         evidence=line[:500])
    if "xit" in line and ("code" in line or "status" in line):
        exited = _EXIT_CODE_RE.search(line)
        number = next((int(g) for g in exited.groups() if g is not None), 0) if exited else 0
        if number:
            return _launcher_exit(index, rank, number, None, line)
    if line.startswith(_HYDRA_FATAL):  # Hydra's account of the job: its message follows (or a traceback does)
        message = following.strip() if following.strip() and not following.startswith("Traceback") else line
        return Fatal("exception", message[:300], index, rank, message=message, group="launcher", evidence=line[:500])
    if line.startswith("Detected KeyboardInterrupt"):  # Lightning's word that Ctrl-C (SIGINT) stopped the fit
        return Fatal("cancelled", f"interrupted (Ctrl-C, SIGINT): {line.strip()[:200]}", index, rank, state="CANCELLED",
                     evidence=line[:500])
    if _HEARTBEAT in line:
        return Fatal("nccl", f"NCCL heartbeat monitor timed out (the watchdog hung): {line.strip()[:200]}", index, rank,
                     evidence=line[:500])
    if "STEPD TERMINATED" in line:
        stuck = _STEPD_TERMINATED_RE.search(line)
        if stuck:
            host = stuck.group("host")
            return Fatal("signal", f"the job's processes on {host} did not end when Slurm signalled them (stuck, "
                         "most often in I/O): Slurm gave up on the step", index, host=host, group="launcher",
                         evidence=line[:500])
    if "NCCL WARN" in line:
        net = _NCCL_NET_RE.search(line)
        if net:
            return Fatal("nccl", f"NCCL network failure: {net.group('what').strip()[:200]}", index, rank,
                         evidence=line[:500])
    if _VLLM_FATAL in line:
        return Fatal("vllm_engine", f"vLLM engine died: {_VLLM_FATAL}", index, rank, evidence=line[:500])
    fault = _cuda_fault(index, rank, line)
    if fault is not None:
        return fault
    if ("Xid" in line or "fallen off the bus" in line) and _GPU_HARDWARE_RE.search(line):  # the driver's (dmesg)
        return Fatal("gpu_hardware", f"GPU hardware fault: {line.strip()[:200]}", index, rank, evidence=line[:500])
    if "xception: " in line and not _WARNING_RE.search(line):
        quoted = _QUOTED_EXC_RE.search(line)
        if quoted:
            message = quoted.group("message")
            kind = _kind_of("", message)
            if kind != "exception" or _EXC_RE.match(message):
                return Fatal(kind, message[:300], index, rank, message=message, evidence=line[:500])
    if line.endswith(")") and "(" in line and ("rrored" in line or "ailed" in line or "rashed" in line
                                               or "borted" in line):
        shown = _REPR_EXC_RE.search(line)
        if shown:
            return _repr_exception(index, rank, shown.group("name"), shown.group("args"), line)
    if "died" in line or "killed" in line or "unexpectedly" in line:
        died = _DIED_RE.search(line)
        if died:  # the sentence that says so, from its start (after a logger's "file.py:12 -- ")
            begin = max(line.rfind(". ", 0, died.start()) + 2, line.rfind(" -- ", 0, died.start()) + 4, 0)
            sentence = line[begin:].split(". ")[0].strip()
            return Fatal("process_died", f"a worker died: {sentence[:200]}", index, rank, evidence=line[:500])
    if "death signal" in line:
        match = _DEATH_SIGNAL_RE.search(line)
        if match:
            return _death_signal(index, match.group("sig"), line)
    if "return code" in line:
        match = _DS_LAUNCHER_RE.search(line)
        if match and match.group(1) != "0":
            return _launcher_exit(index, rank, int(match.group(1)), None, line)
    return None


def _c10_raised(index: int, rank: int | None, above: str) -> Fatal | None:
    """The message of a C++ exception c10 reports (the line above its "Exception raised from …" line), with a
    library's bracketed tag ("[c10d] ") taken off; None when there is no message to read."""
    message = _TAG_RE.sub("", above.strip())
    if not message or message.startswith(("frame #", "Exception raised")):
        return None
    return Fatal(_kind_of("", message), message[:300], index - 1, rank, message=message, evidence=above[:500])


def _repr_exception(index: int, rank: int | None, name: str, args: str, line: str) -> Fatal:
    """The exception a ``repr`` shows, with the message its arguments make (``OSError(28, 'No space left on
    device')`` reads as ``OSError: [Errno 28] No space left on device``, as Python prints it)."""
    import ast

    try:
        values = ast.literal_eval(f"({args},)")
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        values = (args,)
    if len(values) == 2 and isinstance(values[0], int) and isinstance(values[1], str):
        message = f"[Errno {values[0]}] {values[1]}"
    else:
        message = ", ".join(str(v) for v in values)
    kind = _kind_of(name, message)
    return Fatal(kind, f"{name}: {message[:200]}", index, rank, exception=name, message=message,
                 evidence=line[:500])


def _death_signal(index: int, sig: str, line: str) -> Fatal:
    """The launcher's own death by a signal from outside: Ctrl-C (SIGINT) is a cancel; a hang-up (the terminal or
    ssh session closed) or a SIGTERM (a scheduler, a container stop) ended the run with nothing of its own wrong."""
    import signal

    try:
        name = signal.Signals(int(sig)).name if sig.isdigit() else sig
    except ValueError:
        name = f"signal {sig}"
    why = {"SIGHUP": " (its terminal or ssh session closed: run it under nohup, tmux or the scheduler)",
           "SIGINT": " (Ctrl-C)"}.get(name, "")
    return Fatal("cancelled" if name == "SIGINT" else "signal",
                 f"the launcher received {name}{why} and shut its workers down", index, group="launcher",
                 state="CANCELLED" if name == "SIGINT" else "FAILED", evidence=line[:500])


def _glog_fatal(index: int, rank: int | None, raw: str, message: str) -> Fatal | None:
    """A C++ library's own fatal line (:data:`_GLOG_RE`, read on the ``raw`` line: ``normalize`` takes the
    severity off with the prefix): an F line, or an E line whose ``message`` carries an absl status."""
    if len(raw) - len(message) < 28:  # no glog prefix was taken off (it is 30+ characters): most lines
        return None
    match = _GLOG_RE.search(raw[:120])
    if not match or (match.group("severity") == "E" and not _ABSL_STATUS_RE.search(message)):
        return None
    return Fatal(_kind_of("", message), message[:300], index, rank, message=message, evidence=raw[:500])


def _cxx_log_fatal(index: int, rank: int | None, line: str) -> Fatal | None:
    """A C++ library's log line in TensorFlow's format (:data:`_CXX_LOG_RE`) that names a failure."""
    if not line.startswith(("E ", "F ")):
        return None
    match = _CXX_LOG_RE.match(line)
    if match is None:
        return None
    message = match.group("message")
    kind = _kind_of("", message)
    if match.group("severity") == "E" and kind == "exception" and not _ABSL_STATUS_RE.search(message):
        return None
    return Fatal(kind, message[:300], index, rank, message=message, evidence=line[:500])


def _cuda_fault(index: int, rank: int | None, line: str) -> Fatal | None:
    """A CUDA error or a kernel's failed assertion reported in a line that is no exception line (nor a warning)."""
    if "ssertion `" in line:
        match = _ASSERT_RE.search(line)
        if match:
            return Fatal("cuda_error", f"CUDA device-side assertion failed: {match.group(0)[:200]}", index, rank,
                         evidence=line[:500])
    if ("CUDA" in line or "cudaError" in line) and not _WARNING_RE.search(line):
        match = _CUDA_IN_LINE_RE.search(line)
        if match:
            text = match.group(0)
            kind = _kind_of("", text)
            kind = "cuda_oom" if kind in OOM_KINDS else kind if kind != "exception" else "cuda_error"
            return Fatal(kind, text[:300], index, rank, message=text, evidence=line[:500])
    return None


def _launcher_exit(index: int, rank: int | None, code: int, host: str | None, line: str) -> Fatal:
    who = f"rank {rank}" if rank is not None else "a worker"
    if code < -255:  # a Windows NTSTATUS printed as a signed 32-bit number (-1073741819 is 0xC0000005), no signal
        code &= 0xFFFFFFFF
    if code in (-9, 137):
        return Fatal("host_oom", f"{who} killed by SIGKILL, likely the host's OOM killer (exit code {code})", index,
                     rank, host, group="launcher", evidence=line[:500])
    if code < 0:
        import signal

        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        group = "consequence" if name == "SIGTERM" else "launcher"
        return Fatal("signal", f"{who} killed by {name}", index, rank, host, group=group, evidence=line[:500])
    label = f"local_rank {rank}" if rank is not None else "a worker"
    crash = f" (0x{code:X}, Windows: {_WINDOWS_STATUS[code]})" if code in _WINDOWS_STATUS else ""
    return Fatal("exit_code", f"{label} failed, exit code {code}{crash}", index, rank, host, group="launcher",
                 evidence=line[:500])


def _boxes(text: str, end: int) -> list[Fatal]:
    """torchrun's ``ChildFailedError`` box: the "Root Cause" entry, else any failure that was not a SIGTERM.
    A box shown without its header (a paste that starts inside it) is found by its "Root Cause" line."""
    start = text.rfind("ChildFailedError")
    if start == -1:
        start = text.rfind("Root Cause (first observed failure)")
    if start == -1:
        return []
    box = text[start:]
    root = box.find("Root Cause")
    part = box[root:] if root != -1 else box
    out = []
    for match in _BOX_RE.finditer(part):
        rank, code = int(match.group("rank")), int(match.group("code"))
        host = _BOX_HOST_RE.search(part[max(0, match.start() - 200):match.start()])
        fatal = _launcher_exit(end, rank, code, host.group(1) if host else None, match.group(0).replace("\n", " "))
        if code == -9 and "SIGKILL" not in fatal.headline:
            fatal.headline = f"rank {rank} killed by SIGKILL, likely the host's OOM killer"
        out.append(fatal)
    return out
