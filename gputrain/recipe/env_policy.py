"""Which environment variables a recipe may set: an allow-list, because a recipe is data.

A recipe's ``env`` is exported by every launch script (local, Slurm, Docker, RunPod) before the training
starts, on every node. A variable read by the shell, the dynamic loader or the interpreter turns that data
into code: ``BASH_ENV`` runs a file in each ``bash -c`` (the multi-node ``srun bash -c`` path),
``LD_PRELOAD`` loads a library into every process, ``PYTHONPATH``/``PYTHONSTARTUP``/``PATH`` choose what
code runs, and gputrain's own ``GPUTRAIN_SANDBOX_*`` switch would weaken the sandbox that model-written code
runs in. Such names cannot be enumerated (every program reads its own), so the rule is the other way
round: a recipe may set only the tuning knobs of the libraries a training uses — the names below, which
cover every shipped recipe and every remedy of the log doctor (``tests/security/test_boundary_env.py``
checks both) — and names under ``RECIPE_``, a namespace that gputrain and the libraries it runs never
read, free for the user's own code.

The user's own environment and their cluster profile (``setup:``, ``cache_dir``) stay trusted: the
launcher's ``--debug`` adds ``NCCL_DEBUG``/``TORCH_DISTRIBUTED_DEBUG`` itself, and a profile's paths reach
the script as quoted values of names the template writes.
"""

from __future__ import annotations

import re

#: Prefixes a recipe may set: collective-communication, allocator and library tuning, tracking.
ALLOWED_PREFIXES = (
    "NCCL_",  # NCCL tuning (NCCL_IB_DISABLE, NCCL_P2P_LEVEL, NCCL_DEBUG, NCCL_SOCKET_IFNAME ...)
    "TORCH_NCCL_",  # TORCH_NCCL_ASYNC_ERROR_HANDLING, TORCH_NCCL_BLOCKING_WAIT ...
    "HF_",  # Hugging Face hub/datasets data caches and switches (HF_HUB_CACHE, HF_HUB_OFFLINE ...)
    "WANDB_",  # Weights & Biases (WANDB_PROJECT, WANDB_MODE, WANDB_NOTES ...); keys go under `secrets`
    "RECIPE_",  # the user's own settings: nothing gputrain runs reads this namespace
)

#: Single names a recipe may set.
ALLOWED_NAMES = frozenset({
    "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF", "PYTORCH_NO_CUDA_MEMORY_CACHING",
    "TORCH_DISTRIBUTED_DEBUG", "TORCH_CPP_LOG_LEVEL", "TORCH_SHOW_CPP_STACKTRACES", "TORCH_LOGS",
    "CUDA_LAUNCH_BLOCKING", "CUDA_DEVICE_MAX_CONNECTIONS", "CUDA_MODULE_LOADING", "CUBLAS_WORKSPACE_CONFIG",
    "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "TOKENIZERS_PARALLELISM",
    "TRANSFORMERS_OFFLINE", "TRANSFORMERS_VERBOSITY", "HF_DATASETS_OFFLINE",
    "GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME",
    "VLLM_ENABLE_V1_MULTIPROCESSING", "VLLM_LOGGING_LEVEL",
})

#: Names under an allowed prefix that still run or admit code: refused.
DENIED_NAMES = frozenset({
    "HF_ALLOW_CODE_EVAL",  # `evaluate`'s code_eval runs model-written code unsandboxed when set
    "HF_DATASETS_TRUST_REMOTE_CODE",  # `datasets` runs a repository's loading script when set
})

#: Folders Python modules are imported from: transformers appends ``HF_MODULES_CACHE`` (by default
#: ``$HF_HOME/modules``) to ``sys.path`` and imports a trusted repository's code from it, a file already there
#: winning over the repository's (``tests/security/test_boundary_env_modules.py``). An import root, like
#: ``PYTHONPATH``; a site's cache is the cluster profile's ``cache_dir``.
IMPORT_ROOT_NAMES = frozenset({"HF_MODULES_CACHE", "HF_HOME"})

#: What makes a library variable more than a tuning knob, wherever the library puts it in the name: where
#: the client sends the user's credentials (``HF_ENDPOINT`` gets the hub token as a Bearer header,
#: ``WANDB_BASE_URL`` the W&B key, a ``*_PROXY`` sees the traffic), a shared library it loads
#: (``NCCL_NET_PLUGIN`` and its siblings take a path and ``dlopen`` it in every rank), a program it runs
#: (``*_EXECUTABLE``), or a file it reads settings from or writes to (``NCCL_CONF_FILE``,
#: ``NCCL_DEBUG_FILE``, ``TORCH_NCCL_DEBUG_INFO_TEMP_FILE``: a recipe could truncate ``~/.bashrc``). These
#: stay the user's to set in their own environment, never a recipe's.
POWER_RE = re.compile(r"ENDPOINT|URL|PROXY|PLUGIN|EXECUTABLE|(?:_|\A)(?:FILE|PATHS?)(?:_|\Z)")

#: Variables that set how the job's shell, dynamic loader or interpreter behave, or gputrain's own switches
#: (the sandbox's opt-outs among them). A recipe may not set them, nor name them under ``secrets:``: a secret
#: is a value the job reads by name, and forwarding the launching user's own ``GPUTRAIN_SANDBOX_ALLOW_WEAK``
#: or ``LD_PRELOAD`` to a pod would let a recipe choose them there.
RUNTIME_SWITCH_RE = re.compile(
    r"\A(?:GPUTRAIN_|LD_|DYLD_|PYTHON|BASH|SHELL|(?:ENV|PATH|IFS|HOME|TMPDIR|PS4|PROMPT_COMMAND|CDPATH|GLOBIGNORE"
    r"|PERL5OPT|NODE_OPTIONS|RUBYOPT)\Z)")

_NAME_RE = re.compile(r"\A[A-Za-z_][A-Za-z0-9_]*\Z")
_SECRET_HINT_RE = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL)", re.IGNORECASE)


def env_name_allowed(name: str) -> bool:
    """May a recipe export ``name`` to its job?"""
    if name in DENIED_NAMES or name in IMPORT_ROOT_NAMES:
        return False
    if name.startswith("RECIPE_"):  # nothing gputrain runs reads these: no library gives them power
        return True
    if POWER_RE.search(name):
        return False
    return name in ALLOWED_NAMES or name.startswith(ALLOWED_PREFIXES)


def allowed_summary() -> str:
    """The allow-list in one line, for an error message."""
    return ", ".join([*(f"{p}*" for p in ALLOWED_PREFIXES), "PYTORCH_CUDA_ALLOC_CONF", "OMP_NUM_THREADS",
                      "CUDA_*/TORCH_* debug switches (see gputrain/recipe/env_policy.py)"])


#: RunPod replaces ``{{ RUNPOD_SECRET_name }}`` in a pod's env values with the account's stored secret when the
#: pod boots: in a recipe value it would pull the user's secret into the job's environment (and, through a
#: knob that a library logs, into the log). Secrets come from ``secrets:`` by name, nowhere else.
_PLATFORM_REFERENCE_RE = re.compile(r"\{\{|\}\}")


def check_env_value(value: str) -> str:
    """``value`` if a recipe may export it; ValueError (one line) for a platform secret reference."""
    if _PLATFORM_REFERENCE_RE.search(value):
        raise ValueError("a recipe value may not hold '{{ ... }}': RunPod would replace a "
                         "{{ RUNPOD_SECRET_... }} reference with your stored secret; list secrets by name under "
                         "secrets instead")
    return value


def check_env_name(name: str) -> str:
    """``name`` if a recipe may set it; ValueError (one line, naming it) otherwise."""
    if not _NAME_RE.match(name):
        raise ValueError(f"env name {name!r} is not a valid shell variable name")
    if _SECRET_HINT_RE.search(name):
        raise ValueError(f"env {name!r} looks like a secret: list its name under secrets instead")
    if not env_name_allowed(name):
        if name in IMPORT_ROOT_NAMES:
            raise ValueError(f"a recipe may not set {name}: it chooses a folder Python modules are imported from "
                             "(transformers' module cache); set the cache in your cluster profile's cache_dir or "
                             "your own environment")
        if name not in DENIED_NAMES and POWER_RE.search(name):
            raise ValueError(f"a recipe may not set {name}: it chooses where credentials are sent or which code or "
                             "files a library loads or writes; set it in your own environment if you mean it")
        raise ValueError(f"a recipe may not set {name} (a recipe is data; variables read by the shell, loader, "
                         f"interpreter or sandbox are refused); allowed: {allowed_summary()}")
    return name
