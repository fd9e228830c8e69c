"""The project's GPU checks in one command: predicted (the planner) beside measured, one JSON line each.

    # on a GPU machine, from the repository root, after ``bash benchmarks/gpu_bundle.sh`` built .gpu/:
    timeout -k 15 420 python3 .gpu/project/benchmarks/gpu_suite.py --bundle .gpu --out "$OUT" --budget 330
    # anywhere, without CUDA: the same steps in smoke form (tiny shapes, --gpu cpu), as CI runs it
    python3 benchmarks/gpu_suite.py --out /tmp/suite --steps numerics,bench_sdpa

Steps, in priority order (``--steps`` or ``GPU_SUITE_STEPS``, comma-separated, picks and orders them):
bench_sdpa, bench_default (BD3-LM 12 × 768, seq 1024, bf16: SDPA eager, then the shipped default path with its
top CUDA kernels; both with the allocator settings GPU launchers export), bench_pre27 (the default path as it was
before #27: unpadded 50,258-wide head, exact masked rows, allocator defaults), run_bd3lm_preset (a real ``gputrain run`` of bd3lm_gsm8k at the H200 preset),
run_bd3lm_h100_fit (the batch the H100 plan's ``--fit`` advises, run with the allocator capped at an H100's
memory), bench_chunked_ce (the default path with the chunked cross-entropy), run_bd3lm_b64, run_bd3lm_b192
(the conservative and aggressive presets), run_hdp, run_gnn, rl_logprob (padded vs packed log-prob and update
passes, HF generate with the dynamic vs the static cache), run_grpo (0.5B random-init policy, HF generate:
steady step, rollout s and tokens/s beside the plan's rollout, warm-up and compile phases, peak allocated and
reserved beside the plan's memory; ``algorithm.generate_cache`` auto: the static KV cache, decode compiled),
run_grpo_dynamic (the same on the dynamic cache, as before #27's static cache), run_grpo_packed (the same with
``algorithm.sequence_packing=true``: the trainer's packed passes, FlexAttention's compile as warm-up),
numerics (flex vs SDPA forward and gradients, bf16/fp16 vs fp32, chunked CE), then #27 one change at a time:
bench_no_expandable (padded head + bucketed rows, allocator defaults: reserved vs bench_default) and
bench_padded (padded head only: GEMM kernels vs bench_pre27), rl_logprob_flex (packed log-prob and update
passes through FlexAttention with a document mask, fp32 gradients vs padded), rl_generate (HF generate, dynamic
vs static KV cache at run_grpo's 64 × 256, warm-up at the timed shape), then #27's speed levers:
bench_fast (the loss as one compiled function + the adaLN modulation shared; top kernels), bench_shared_mod and
bench_compiled_ce (each alone), bench_autotune (bench_fast with FlexAttention's tile sizes autotuned).
``env`` always runs first.

Every step runs in its own process group with its own cap (``--budget`` is for all steps together; a step never
gets more than its cap nor more than what is left), so a slow step cannot eat the rest. Output under ``--out``:
``results.jsonl`` (one record per measurement: ``pred_*`` beside ``meas_*``), ``log.txt`` (every
subprocess's output), ``side.json`` (plans, perf.json, kernel tables), ``summary.txt`` (the short table).
The driver needs only the standard library; what it measures runs with the bundle's wheels on PYTHONPATH.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

PROJECT = Path(__file__).resolve().parent.parent
T0 = time.monotonic()
#: allocator cap that stands for an 80 GB H100 (79.6 GiB in the catalog, ~0.6 GiB of it the CUDA context)
H100_ALLOCATOR_GIB = 79.0

SITECUSTOMIZE = '''"""gpu_suite hook for the trainer processes torchrun starts (LOCAL_RANK set): cap the CUDA allocator at
GPU_SUITE_MEM_GIB, and write max_memory_allocated/reserved to GPU_SUITE_MEMFILE at exit and, from a daemon
thread, every GPU_SUITE_MEM_EVERY seconds (2) whenever the peaks grew: a job the step's cap ends while it closes
(the H100's GRPO jobs, 2026-11-27) still leaves its peak. Chains to any other sitecustomize on the path."""
import os, sys
if os.environ.get("LOCAL_RANK") is not None and os.environ.get("GPU_SUITE_MEMFILE"):
    if os.environ.get("GPU_SUITE_MEM_GIB"):
        import torch
        if torch.cuda.is_available():
            _total = torch.cuda.get_device_properties(0).total_memory
            torch.cuda.set_per_process_memory_fraction(min(1.0, float(os.environ["GPU_SUITE_MEM_GIB"]) * 2**30 / _total), 0)
    import atexit, json, threading, time
    _seen = [None]

    def _gpu_suite_mem(at="exit"):
        torch = sys.modules.get("torch")  # never imported nor CUDA initialised from here
        if torch is None or not torch.cuda.is_available() or not torch.cuda.is_initialized():
            return
        dev = int(os.environ.get("LOCAL_RANK") or 0) % max(1, torch.cuda.device_count())
        peaks = (torch.cuda.max_memory_allocated(dev), torch.cuda.max_memory_reserved(dev))
        if at != "exit" and peaks == _seen[0]:
            return
        _seen[0] = peaks
        rec = {"rank": os.environ.get("RANK"), "max_allocated_gib": peaks[0] / 2**30,
               "max_reserved_gib": peaks[1] / 2**30, "at": at, "t": round(time.time(), 1),
               "mem_fraction_gib": os.environ.get("GPU_SUITE_MEM_GIB")}
        with open(os.environ["GPU_SUITE_MEMFILE"], "a") as fh:
            fh.write(json.dumps(rec) + "\\n")

    def _gpu_suite_poll():
        while True:
            time.sleep(float(os.environ.get("GPU_SUITE_MEM_EVERY") or 2))
            try:
                _gpu_suite_mem("poll")
            except Exception:
                pass
    atexit.register(_gpu_suite_mem)
    threading.Thread(target=_gpu_suite_poll, name="gpu_suite_mem", daemon=True).start()
import importlib.machinery as _m, importlib.util as _u
_here = os.path.dirname(os.path.abspath(__file__))
_spec = _m.PathFinder.find_spec("sitecustomize", [p for p in sys.path if os.path.abspath(p or ".") != _here])
if _spec is not None and _spec.loader is not None:
    _mod = _u.module_from_spec(_spec)
    _spec.loader.exec_module(_mod)
'''


class Suite:
    def __init__(self, out: Path, work: Path, budget: float, gpu: bool, bundle: Path | None) -> None:
        self.out, self.work, self.gpu, self.bundle = out, work, gpu, bundle
        self.deadline = T0 + budget
        self.results = open(out / "results.jsonl", "a", buffering=1)
        self.log = open(out / "log.txt", "a", buffering=1)
        self.side: dict[str, Any] = {}
        self.plans: dict[tuple[str, ...], dict[str, Any]] = {}
        self.py = os.environ.get("PYTHON", sys.executable)
        self.commit = (bundle / "COMMIT").read_text().strip() if bundle and (bundle / "COMMIT").is_file() else \
            _git_head()
        self.device = "cpu"
        self.env = self._env()

    def _env(self) -> dict[str, str]:
        site = self.work / "site"
        hook = self.work / "hook"
        hook.mkdir(parents=True, exist_ok=True)
        (hook / "sitecustomize.py").write_text(SITECUSTOMIZE)
        paths = [str(hook), str(site), str(PROJECT)]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths + [os.environ.get("PYTHONPATH", "")]).rstrip(":"),
               "PYTHON": self.py, "GPUTRAIN_HOME": str(self.work / "home"), "PYTHONUNBUFFERED": "1",
               "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
               "WANDB_MODE": "disabled", "TOKENIZERS_PARALLELISM": "false"}
        if self.bundle is not None:
            env["HF_HOME"] = str((self.bundle / "hf").resolve())
        return env

    def catalog_gpu(self) -> str:
        """The catalog name of the card step_env found (runs plan and resolve for the card they run on)."""
        return "H100" if "H100" in self.device else "H200"

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def emit(self, step: str, **kw: Any) -> None:
        rec = {"step": step, "t_s": round(time.monotonic() - T0, 1), "device": self.device,
               "commit": self.commit[:12], **kw}
        line = json.dumps(rec, default=str)
        self.results.write(line + "\n")
        self.log.write(f"### RESULT {line[:3000]}\n")

    def save_side(self) -> None:
        (self.out / "side.json").write_text(json.dumps(self.side, indent=1, default=str))

    def run(self, name: str, cmd: list[str], cap: float, env: dict[str, str | None] | None = None
            ) -> dict[str, Any]:
        """cmd in its own process group, killed (TERM, then KILL) at min(cap, what is left); a None in ``env``
        removes that variable."""
        timeout = max(5.0, min(cap, self.left() - 2))
        self.log.write(f"\n===== [{name}] t={time.monotonic() - T0:.1f}s timeout={timeout:.0f}s\n$ {' '.join(cmd)}\n")
        tic, lines = time.monotonic(), []
        full = {k: v for k, v in {**self.env, **(env or {})}.items() if v is not None}
        proc = subprocess.Popen(cmd, cwd=PROJECT, env=full, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, errors="replace", start_new_session=True)

        def pump() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                lines.append(line)
                self.log.write(line)

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        timed_out = False
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            for sig in (signal.SIGTERM, signal.SIGKILL):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, sig)  # the group this call started
                try:
                    proc.wait(timeout=10)
                    break
                except subprocess.TimeoutExpired:
                    continue
            rc = proc.returncode
        reader.join(5)
        wall = time.monotonic() - tic
        self.log.write(f"===== [{name}] rc={rc} timed_out={timed_out} wall={wall:.1f}s\n")
        return {"rc": rc, "ok": rc == 0 and not timed_out, "timed_out": timed_out, "wall_s": round(wall, 1),
                "cap_s": round(timeout), "_lines": lines}


def _git_head() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=PROJECT, capture_output=True, text=True,
                              timeout=10).stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def last_json(lines: list[str]) -> dict[str, Any]:
    for line in reversed(lines):
        s = line.strip()
        if s.startswith("{") and s.endswith("}"):
            with contextlib.suppress(ValueError):
                return dict(json.loads(s))
    return {}


def tail(lines: list[str], n: int = 8) -> list[str]:
    return [x.rstrip()[-300:] for x in lines[-n:]]


def ratio(measured: Any, predicted: Any) -> float | None:
    if isinstance(measured, (int, float)) and isinstance(predicted, (int, float)) and predicted:
        return round(measured / predicted, 3)
    return None


# ---------------------------------------------------------------- the planner's side


def plan(s: Suite, key: str, recipe: str, sets: list[str], gpu: str = "H200", extra: list[str] | None = None
         ) -> dict[str, Any]:
    """``gputrain plan --json`` as the planner predicts it now; the fields the records compare."""
    cmd = [s.py, "-m", "gputrain", "plan", f"recipes/{recipe}", "--gpu", gpu, "--gpus", "1", "--json",
           *(extra or [])]
    for x in sets:
        cmd += ["--set", x]
    res = s.run(f"plan:{key}", cmd, 60)
    text = "".join(res["_lines"])
    try:
        d = json.loads(text[text.index("{"): text.rindex("}") + 1])
    except ValueError:
        s.emit(f"plan:{key}", ok=False, recipe=recipe, sets=sets, error_tail=tail(res["_lines"]))
        return {}
    if isinstance(d.get("artifacts"), dict):
        d["artifacts"].clear()
    s.side[f"plan:{key}"] = d
    return pred_fields(d)


def pred_fields(d: dict[str, Any]) -> dict[str, Any]:
    e, r = d.get("estimate", {}) or {}, d.get("recipe", {}) or {}
    tr = r.get("train", {}) or {}
    brk = e.get("memory_breakdown") or {}
    ctx = brk.get("cuda_context") if isinstance(brk, dict) else None
    return {"pred_step_s": e.get("step_seconds"), "pred_mem_gib": e.get("memory_gib_per_gpu"),
            "pred_context_gib": ctx, "pred_mfu": e.get("mfu"), "pred_step_flops": e.get("step_flops"),
            "pred_phases": e.get("phases"), "plan_attention": d.get("attention"), "plan_compile": tr.get("compile"),
            "plan_kernels": d.get("kernels") or e.get("kernels"), "plan_precision": d.get("precision"),
            "plan_batch_size": tr.get("batch_size"), "plan_grad_accum": tr.get("grad_accum"),
            "plan_fit": e.get("fit"), "pred_memory_breakdown": brk}


# ---------------------------------------------------------------- steps


ENV_PY = r"""
import json, importlib, importlib.util, subprocess, sys
r = {"python": sys.version.split()[0]}
import torch
r["torch"] = torch.__version__
r["cuda_available"] = torch.cuda.is_available()
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    r.update(device_name=p.name, capability=list(torch.cuda.get_device_capability(0)),
             total_mem_gib=round(p.total_memory / 2**30, 2), sms=p.multi_processor_count)
    try:
        r["nvidia_smi"] = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version,power.limit,"
                                          "clocks.max.sm", "--format=csv,noheader"], capture_output=True,
                                         text=True, timeout=20).stdout.strip()
    except Exception as e:
        r["nvidia_smi"] = f"error: {e}"
for mod in ["pydantic", "transformers", "triton", "gputrain", "torch_geometric", "flash_attn", "vllm"]:
    try:
        m = importlib.import_module(mod)
        r[f"mod_{mod}"] = getattr(m, "__version__", "?")
    except Exception as e:
        r[f"mod_{mod}"] = f"missing: {type(e).__name__}"
try:
    from gputrain.contract.kernels import KernelRequest, resolve
    from gputrain.train.runtime.kernels import detect_facts
    facts = detect_facts()
    r["resolver_facts"] = facts.model_dump()
    r["resolved_auto_block"] = resolve(KernelRequest(mask="block"), facts).model_dump()
except Exception as e:
    r["resolver_error"] = f"{type(e).__name__}: {e}"[:300]
print(json.dumps(r))
"""


def step_env(s: Suite) -> None:
    res = s.run("env", [s.py, "-c", ENV_PY], 90)
    data = last_json(res.pop("_lines"))
    s.device = str(data.get("device_name", "cpu"))
    s.emit("env", **res, **data)


BENCH_PLAN_SETS = ["model.seq_len=1024", "train.batch_size=32", "train.grad_accum=1",
                   "estimate.tokens_per_sample=2048", "algorithm.ema=0"]  # diffusion_mfu.py keeps no EMA copy


def bench_switch_sets(variant: list[str]) -> list[str]:
    """The recipe switches a bench variant pins (``--ce``, ``--[no-]shared-modulation``, ``--inductor-mode``), as
    ``--set`` overrides: each bench is planned with the path it runs, not the recipe's defaults (#28)."""
    sets = []
    for flag, key in (("--ce", "loss_kernel"), ("--inductor-mode", "compile_mode")):
        if flag in variant:
            sets.append(f"algorithm.{key}={variant[variant.index(flag) + 1]}")
    for flag, value in (("--shared-modulation", "true"), ("--no-shared-modulation", "false")):
        if flag in variant:
            sets.append(f"algorithm.shared_modulation={value}")
    return sets


def _allocator_env() -> dict[str, str]:
    """What a GPU launcher exports for the CUDA allocator (read from its one home, stdlib only)."""
    import importlib.util

    path = PROJECT / "gputrain" / "render" / "allocator_env.py"
    spec = importlib.util.spec_from_file_location("_allocator_env", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return dict(mod.GPU_ALLOCATOR_ENV)


#: a bench without the launcher's allocator settings (the allocator's own defaults, as before #27)
NO_ALLOCATOR_ENV: dict[str, str | None] = {"PYTORCH_CUDA_ALLOC_CONF": None, "PYTORCH_ALLOC_CONF": None}


def _bench(s: Suite, key: str, variant: list[str], plan_sets: list[str], cap: float, profile: int = 0,
           launcher_env: bool = True) -> None:
    """``launcher_env``: run with the allocator settings ``gputrain run``'s launcher exports on a GPU."""
    if s.gpu:
        shape = ["--layers", "12", "--hidden", "768", "--heads", "12", "--batch", "32", "--seq-len", "1024",
                 "--steps", "12", "--warmup", "4"]
    else:
        shape = ["--device", "cpu", "--layers", "2", "--hidden", "64", "--heads", "4", "--vocab", "258",
                 "--seq-len", "64", "--batch", "2", "--steps", "2", "--warmup", "1"]
        profile = min(profile, 1)
    args = [*shape, *variant] + (["--profile", str(profile)] if profile else [])
    sets = BENCH_PLAN_SETS + bench_switch_sets(variant) + plan_sets
    if (pred := s.plans.get(tuple(sets))) is None:  # variants of one path share its plan
        pred = s.plans[tuple(sets)] = plan(s, f"bench_{key}", "bd3lm_gsm8k.yaml", sets)
    env: dict[str, str | None] = {**_allocator_env()} if launcher_env else dict(NO_ALLOCATOR_ENV)
    res = s.run(f"bench:{key}", [s.py, "benchmarks/diffusion_mfu.py", *args], cap, env=env)
    lines = res.pop("_lines")
    data = last_json(lines)
    kernels = data.pop("top_kernels", None)
    if kernels:
        s.side[f"kernels:{key}"] = kernels
    if not res["ok"]:
        res["error_tail"] = tail(lines)
    meas = {"meas_step_s": data.get("step_s"), "meas_alloc_gib": data.get("peak_mem_gib"),
            "meas_reserved_gib": data.get("peak_reserved_gib"), "meas_mfu": data.get("mfu")}
    s.emit(f"bench:{key}", args=args, **res, **meas, **pred,
           ratio_step=ratio(meas["meas_step_s"], pred.get("pred_step_s")),
           ratio_alloc=ratio(meas["meas_alloc_gib"], _less(pred.get("pred_mem_gib"), pred.get("pred_context_gib"))),
           top_kernels=(kernels or [])[:12], **{k: v for k, v in data.items() if k not in ("peak_mem_gib",)})


def _less(a: Any, b: Any) -> Any:
    return a - b if isinstance(a, (int, float)) and isinstance(b, (int, float)) else a


def step_bench_sdpa(s: Suite) -> None:
    _bench(s, "sdpa_eager", ["--attention", "sdpa"], ["train.attention=sdpa", "train.compile=false"], 75)


def step_bench_default(s: Suite) -> None:
    """The shipped default (``attention: auto``, ``compile: auto``) as the resolver decides it on this node."""
    _bench(s, "default", ["--attention", "auto", "--compile-mode", "auto"], [], 150, profile=3)


#: issue #27, one change at a time from the path measured before it (34.6 % MFU on the H200, 32.0 % H100)
PRE27 = ["--attention", "auto", "--compile-mode", "auto", "--ce", "torch", "--no-shared-modulation",
         "--inductor-mode", "default", "--vocab-multiple", "1", "--head-rows", "exact"]


def step_bench_pre27(s: Suite) -> None:
    """The default path as it was before #27: 50,258-wide head, exact masked rows, allocator defaults."""
    _bench(s, "pre27", PRE27, [], 120, launcher_env=False)


def step_bench_padded(s: Suite) -> None:
    """+ the head padded to 50,304 (the sm90 GEMMs instead of the sm80 align2 ones?)."""
    _bench(s, "padded", PRE27[:-4] + ["--head-rows", "exact"], [], 120, launcher_env=False)


def step_bench_no_expandable(s: Suite) -> None:
    """+ the loss rows in fixed-size buckets; still the allocator's defaults (reserved vs bench_default)."""
    _bench(s, "no_expandable", PRE27[:-4], [], 120, launcher_env=False)


def step_bench_chunked_ce(s: Suite) -> None:
    _bench(s, "default_chunked_ce", ["--attention", "auto", "--compile-mode", "auto", "--ce", "chunked"], [], 120)


#: issue #27's speed levers (same values and gradients: tests/unit/test_diffusion_fast_paths.py), on the default path
FAST = ["--attention", "auto", "--compile-mode", "auto", "--ce", "compiled", "--shared-modulation",
        "--inductor-mode", "default"]


def step_bench_fast(s: Suite) -> None:
    """Both levers: the head + loss as one compiled function, the adaLN modulation shared (top kernels)."""
    _bench(s, "fast", FAST, [], 150, profile=3)


def step_bench_shared_mod(s: Suite) -> None:
    """The modulation shared only (bench_fast minus this = the compiled loss's share)."""
    _bench(s, "shared_mod", [*FAST[:4], "--ce", "torch", "--shared-modulation"], [], 120)


def step_bench_compiled_ce(s: Suite) -> None:
    """The compiled loss only."""
    _bench(s, "compiled_ce", [*FAST[:6], "--no-shared-modulation"], [], 120)


def step_bench_autotune(s: Suite) -> None:
    """bench_fast with FlexAttention's tiles autotuned (``autotune-attention``; first_step_s = the compile cost)."""
    _bench(s, "autotune", [*FAST[:-1], "autotune-attention"], [], 180)


# the short real runs: generated data, no clip search, no samples, few steps (each logged interval is a step time)
BD3_RUN = ["data.source=generated", "data.format=generated", "data.train_size=4096", "data.val_size=64",
           "algorithm.tokenizer=gpt2", "algorithm.eval_batches=1", "algorithm.clip_search=false",
           "algorithm.num_samples=0", "train.eval_every=100000", "train.save_every=100000", "train.num_workers=0",
           "train.log_every=2"]
BD3_SMOKE = ["data.source=generated", "data.format=generated", "data.train_size=64", "data.val_size=8",
             "algorithm.eval_batches=1", "algorithm.clip_search=false", "algorithm.num_samples=0",
             "train.eval_every=100000", "train.save_every=100000", "train.max_steps=4", "train.log_every=1"]


def gputrain_run(s: Suite, key: str, recipe: str, sets: list[str], cap: float, preset: str | None = None,
                 mem_gib: float | None = None) -> None:
    logs = s.work / f"logs_{key}"
    memfile = s.work / f"mem_{key}.jsonl"
    gpu = ["--gpu", s.catalog_gpu(), "--gpus", "1"] if s.gpu else ["--gpu", "cpu", "--gpus", "1"]
    cmd = [s.py, "-m", "gputrain", "run", f"recipes/{recipe}", *gpu, "--logs-dir", str(logs)]
    if preset and s.gpu:
        cmd += ["--preset", preset]
    for x in sets:
        cmd += ["--set", x]
    env = {"GPU_SUITE_MEMFILE": str(memfile)}
    if mem_gib is not None:
        env["GPU_SUITE_MEM_GIB"] = str(mem_gib)
    res = s.run(f"run:{key}", cmd, cap, env)
    lines = res.pop("_lines")
    info = collect_job(s, key, logs, memfile)
    if not res["ok"]:
        res["error_tail"] = tail(lines, 10)
        res["oom"] = any("OutOfMemoryError" in x or "CUDA out of memory" in x for x in lines)
    info["runtime_lines"] = [x.rstrip()[-240:] for x in lines if "[runtime]" in x or "compile" in x.lower()][:16]
    s.emit(f"run:{key}", recipe=recipe, preset=preset, sets=sets, mem_cap_gib=mem_gib, **res, **info)


def collect_job(s: Suite, key: str, logs: Path, memfile: Path) -> dict[str, Any]:
    jobs = sorted(p for p in logs.glob("*") if p.is_dir()) if logs.is_dir() else []
    info: dict[str, Any] = {}
    if memfile.is_file():
        recs = [json.loads(x) for x in memfile.read_text().splitlines() if x.strip()]
        if recs:
            info["meas_alloc_gib"] = round(max(r["max_allocated_gib"] for r in recs), 2)
            info["meas_reserved_gib"] = round(max(r["max_reserved_gib"] for r in recs), 2)
            # "exit": written as the trainer closed; "poll": the job was ended first (the hook's last reading)
            info["meas_mem_at"] = "exit" if any(r.get("at", "exit") == "exit" for r in recs) else "poll"
    if not jobs:
        return info
    jd = jobs[-1]
    side: dict[str, Any] = {}
    for name in ("plan.json", "perf.json", "summary.json", "result.json"):
        f = jd / name
        if f.is_file():
            with contextlib.suppress(ValueError):
                side[name] = json.loads(f.read_text())
    metrics = jd / "metrics.jsonl"
    recs = [json.loads(x) for x in metrics.read_text().splitlines() if x.strip().startswith("{")] \
        if metrics.is_file() else []
    side["metrics_tail"] = recs[-40:]
    for f in sorted(jd.glob("*summary*.txt")):
        side[f.name] = f.read_text()[:6000]
    s.side[f"run:{key}"] = side
    p = side.get("plan.json") or {}
    info.update(pred_fields(p))
    perf = side.get("perf.json") or {}
    info.update(meas_step_s=perf.get("step_seconds"), meas_steps_timed=perf.get("steps_timed"),
                meas_perf_peak_gib=perf.get("peak_memory_gib"), meas_phases=perf.get("phases"),
                meas_tokens_per_s=perf.get("tokens_per_s"), meas_wall_s=perf.get("wall_seconds"))
    for k in ("mfu", "samples_per_s", "tokens_per_s", "rollout_tokens_per_s", "compile_seconds", "step_seconds",
              "tokens/real", "tokens/logprob_processed", "tokens/update_processed"):
        vals = [r[k] for r in recs if isinstance(r.get(k), (int, float))]
        if vals:
            info[f"metric_{k}_median"] = sorted(vals)[len(vals) // 2]
    info.update(rl_fields(recs, p, perf))
    result = side.get("result.json") or {}
    if "generate_cache" in result:  # GRPO (#27): the KV cache HF generate ran with, and a static cache's fall back
        info.update(meas_generate_cache=result["generate_cache"],
                    meas_generate_cache_fallback=result.get("generate_cache_fallback"))
    info["ratio_step"] = ratio(info.get("meas_step_s", info.get("meas_steady_step_s")), info.get("pred_step_s"))
    info["ratio_alloc"] = ratio(info.get("meas_alloc_gib", info.get("meas_perf_peak_gib")),
                                _less(info.get("pred_mem_gib"), info.get("pred_context_gib")))
    return info


def _median(vals: list[float]) -> float | None:
    vals = sorted(vals)
    if not vals:
        return None
    mid = len(vals) // 2
    return vals[mid] if len(vals) % 2 else (vals[mid - 1] + vals[mid]) / 2


def rl_fields(recs: list[dict[str, Any]], plan_json: dict[str, Any], perf: dict[str, Any]) -> dict[str, Any]:
    """An RL job's figures beside the plan's, from its own metrics.jsonl (so they exist even when the job was
    ended before perf.json): every step's time and compile, the steady step (``contract.perf.steady_steps``'s
    rule: not the first of more than two, not one that compiled), the warm-up those steps took, and the
    rollout (seconds and generated tokens/s over the steady steps) beside the planner's rollout phase."""
    steps = [r for r in recs if isinstance(r.get("step_seconds"), (int, float)) and "rollout_seconds" in r]
    if not steps:
        return {}
    compiled = [float(r.get("compile_seconds") or 0.0) > 0 for r in steps]
    warm = ({0} if len(steps) > 2 else set()) | {i for i, c in enumerate(compiled) if c}
    keep = [i for i in range(len(steps)) if i not in warm] or [i for i, c in enumerate(compiled) if not c] \
        or list(range(len(steps)))
    steady = [steps[i] for i in keep]
    est = plan_json.get("estimate") or {}
    pred_rollout = (est.get("phases") or {}).get("rollout")
    out: dict[str, Any] = {
        "meas_step_times_s": [round(r["step_seconds"], 3) for r in steps],
        "meas_compile_by_step_s": [round(float(r.get("compile_seconds") or 0.0), 2) for r in steps],
        "meas_steady_step_s": _median([r["step_seconds"] for r in steady]),
        "meas_steady_steps": len(steady),
        "meas_warmup_s": round(sum(r["step_seconds"] for i, r in enumerate(steps) if i not in keep), 2),
        "meas_compile_s": round(sum(float(r.get("compile_seconds") or 0.0) for r in steps), 2),
        "meas_perf_warmup_s": perf.get("warmup_seconds"), "meas_perf_compile_s": perf.get("compile_seconds"),
        "meas_rollout_s": _median([r["rollout_seconds"] for r in steady]),
        "meas_rollout_tokens_per_s": _median([r["rollout_tokens_per_s"] for r in steady
                                              if isinstance(r.get("rollout_tokens_per_s"), (int, float))]),
        "meas_completion_mean_len": _median([r["completions/mean_length"] for r in steady
                                             if isinstance(r.get("completions/mean_length"), (int, float))]),
        "meas_phases_steady": {k: _median([r[k] for r in steady if isinstance(r.get(k), (int, float))])
                               for k in ("rollout_seconds", "reward_seconds", "weight_sync_seconds")},
        "pred_rollout_s": pred_rollout, "pred_overhead_s": est.get("overhead_seconds"),
        "pred_step_range_s": est.get("step_range_seconds"), "pred_memory_range_gib": est.get("memory_range_gib"),
    }
    out["ratio_rollout"] = ratio(out["meas_rollout_s"], pred_rollout)
    return out


def step_run_bd3lm(s: Suite, key: str, preset: str | None, steps: int, cap: float) -> None:
    if s.gpu:
        gputrain_run(s, key, "bd3lm_gsm8k.yaml", BD3_RUN + [f"train.max_steps={steps}"], cap, preset=preset)
    else:
        gputrain_run(s, key, "bd3lm_gsm8k.yaml", BD3_SMOKE + ["train.batch_size=4"], cap)


def step_run_h100_fit(s: Suite) -> None:
    """Does the H100 plan's --fit advice fit? Run it with the allocator capped at an H100's memory."""
    d = plan(s, "bd3lm_h100_fit", "bd3lm_gsm8k.yaml", [], gpu="H100", extra=["--fit"])
    batch, accum = d.get("plan_batch_size"), d.get("plan_grad_accum")
    s.emit("plan:bd3lm_h100_fit", ok=bool(d), **d)
    if not isinstance(batch, int):
        return
    sets = [f"train.batch_size={batch}", f"train.grad_accum={accum or 1}"]
    if s.gpu:
        gputrain_run(s, "bd3lm_h100_fit", "bd3lm_gsm8k.yaml", BD3_RUN + sets + ["train.max_steps=4"], 110,
                     mem_gib=H100_ALLOCATOR_GIB)
    else:
        gputrain_run(s, "bd3lm_h100_fit", "bd3lm_gsm8k.yaml", BD3_SMOKE + ["train.batch_size=4"], 200,
                     mem_gib=H100_ALLOCATOR_GIB)


def step_run_hdp(s: Suite) -> None:
    if s.gpu:
        gputrain_run(s, "hdp", "hdp_diffusion.yaml", BD3_RUN + ["train.max_steps=6"], 110)
    else:
        gputrain_run(s, "hdp", "hdp_diffusion.yaml", BD3_SMOKE + ["train.batch_size=4"], 200)


def step_run_gnn(s: Suite) -> None:
    if s.gpu:
        gputrain_run(s, "gnn_coloring", "gnn_coloring.yaml",
                     ["data.train_size=2940", "data.val_size=490", "train.epochs=2", "train.log_every=10",
                      "algorithm.eval_graphs=24", "algorithm.search_moves=300", "algorithm.onnx_check_runs=1"], 80)
    else:
        gputrain_run(s, "gnn_coloring", "gnn_coloring.yaml",
                     ["data.train_size=64", "data.val_size=16", "train.epochs=1", "train.log_every=2",
                      "algorithm.eval_graphs=4", "algorithm.search_moves=100", "algorithm.onnx_check_runs=1",
                      "train.num_workers=0"], 200)


GRPO_RUN = ["model.name=tiny-qwen2", "model.hidden_size=1280", "model.num_layers=24", "model.num_heads=20",
            "model.num_kv_heads=20", "model.vocab_size=512", "model.params=5.0e8", "model.seq_len=512",
            "data.source=generated", "data.format=generated", "data.train_size=256", "train.batch_size=64",
            "train.max_steps=3", "train.log_every=1", "train.eval_every=null", "train.save_every=null",
            "train.precision=bf16", "train.gradient_checkpointing=false", "distributed.strategy=ddp",
            "algorithm.prompt_format=raw", "algorithm.rollout_engine=hf", "algorithm.num_generations=8",
            "algorithm.max_prompt_length=64", "algorithm.max_completion_length=256",
            "algorithm.eval_dataset=held_out", "algorithm.eval_samples=0", "algorithm.sandbox_workers=8",
            "algorithm.sandbox_timeout_s=3.0"]
# eval_samples=0: no final evaluation (24 s on the H100, 2026-11-27, after which the cap killed the run before its
# memory record); save_every=null: no closing checkpoint (fp32 weights + AdamW moments, ~6 GB to write). What
# the step compares with the planner: steady step, rollout, peak memory allocated and reserved, warm-up/compile.
GRPO_SMALL = {"model.hidden_size": "64", "model.num_layers": "2", "model.num_heads": "4", "model.num_kv_heads": "4",
              "model.params": "2.0e5", "algorithm.max_completion_length": "8", "algorithm.num_generations": "4",
              "train.batch_size": "4", "train.max_steps": "3",
              "train.precision": "fp32", "algorithm.sandbox_workers": "2"}


def step_run_grpo(s: Suite, key: str = "grpo_0.5B_hf", extra: tuple[str, ...] = (), cap: float = 150) -> None:
    """The GRPO job as shipped: ``algorithm.generate_cache`` auto, so on the GPU HF generate runs on the static
    KV cache with its decode step compiled (#27; the record's ``meas_generate_cache`` says which ran, and
    ``meas_compile_by_step_s`` whether steps 2-3 recompiled: they must not). On the CPU, where auto keeps the
    dynamic cache, the smoke asks for the static one (eager there) so the trainer's static path runs end to end."""
    env_extra = {"GPUTRAIN_SANDBOX_ALLOW_WEAK": "1"}
    s.env.update(env_extra)
    if s.gpu:
        # H100 2026-11-27: start + model load ~25 s, 3 steps 51 s padded (32.4 s warm-up first) / 77 s packed
        # (46.1 s compile, 22.0 s recompile), no final evaluation nor closing checkpoint: ~80 / ~105 s; the static
        # cache's decode compile adds ~24 s to the first step (H200 2026-11-27) and takes ~6 s off each step. A
        # cap that ends it early still leaves the steps (metrics.jsonl) and the peaks (the hook's 2 s readings).
        gputrain_run(s, key, "grpo_code_mbpp.yaml", GRPO_RUN + list(extra), cap)
    else:
        sets = [f"{k}={GRPO_SMALL.get(k, v)}" for k, v in (x.split("=", 1) for x in GRPO_RUN)]
        if not any(x.startswith("algorithm.generate_cache=") for x in extra):
            sets.append("algorithm.generate_cache=static")
        gputrain_run(s, key, "grpo_code_mbpp.yaml", sets + list(extra), 200)


def step_run_grpo_dynamic(s: Suite) -> None:
    """#27: run_grpo on HF generate's dynamic KV cache, the path before ``algorithm.generate_cache`` (the rows
    of 2026-11-27: H200 steady 8.075 s, rollout 6.28 s): beside run_grpo, what the static cache changed."""
    step_run_grpo(s, "grpo_0.5B_hf_dynamic", ("algorithm.generate_cache=dynamic",), cap=120)


def step_run_grpo_packed(s: Suite) -> None:
    """#27: run_grpo with the trainer's packed log-prob and update passes (FlexAttention on the GPU)."""
    step_run_grpo(s, "grpo_0.5B_hf_packed", ("algorithm.sequence_packing=true",), cap=170)


def _script_step(s: Suite, key: str, script: str, args: list[str], cap: float) -> None:
    """Run one benchmark script that prints a JSON line and record that line (with the output's tail when the
    script failed or its cap ended it: what it printed before is kept)."""
    res = s.run(key, [s.py, script, *args], cap)
    lines = res.pop("_lines")
    data = last_json(lines)
    if not res["ok"]:
        res["error_tail"] = tail(lines)
    s.emit(key, **res, **data)


def step_rl_logprob(s: Suite) -> None:
    _script_step(s, "rl_logprob", "benchmarks/rl_logprob_bench.py", [] if s.gpu else ["--smoke"], 90)


def step_rl_generate(s: Suite) -> None:
    """#27: HF generate with the dynamic vs the static KV cache at run_grpo's rollout shape (64 prompts × 256 new
    tokens), each timed after an untimed call of the same shape (the static cache's compile: ``*_first_s``).
    At 16 × 128 the static cache had measured slower (2026-11-26), with a 4-token warm-up that left its
    recompile for the timed length inside the timed call."""
    args = ["--generate-only"] + (["--gen-rows", "64", "--new-tokens", "256"] if s.gpu else ["--smoke"])
    # cap 150 s: start + model ~15 s, dynamic ~25 s (first call 19.7 s), the static cache's compile 24.7 s + a call
    # (H200 2026-11-27: 60 s cut it during the compile); a compile that does not fit keeps the dynamic figures
    _script_step(s, "rl_generate", "benchmarks/rl_logprob_bench.py", args, 150)


def step_rl_logprob_flex(s: Suite) -> None:
    """#27: the packed passes through FlexAttention (document mask) beside the padded ones; fp32 gradients."""
    args = ["--packed", "flex", "--no-generate"] + ([] if s.gpu else ["--smoke"])
    _script_step(s, "rl_logprob_flex", "benchmarks/rl_logprob_bench.py", args, 150)


def step_numerics(s: Suite) -> None:
    args = ["--device", "cuda"] if s.gpu else ["--device", "cpu"]
    _script_step(s, "numerics", "benchmarks/diffusion_numerics.py", args, 90)


#: (name, function, seconds that must be left to start it)
STEPS: list[tuple[str, Callable[[Suite], None], float]] = [
    ("bench_sdpa", step_bench_sdpa, 30),
    ("bench_default", step_bench_default, 60),
    ("bench_pre27", step_bench_pre27, 50),
    ("run_bd3lm_preset", lambda s: step_run_bd3lm(s, "bd3lm_preset", None, 6, 130), 60),
    ("run_bd3lm_h100_fit", step_run_h100_fit, 50),
    ("bench_chunked_ce", step_bench_chunked_ce, 50),
    ("run_bd3lm_b64", lambda s: step_run_bd3lm(s, "bd3lm_b64", "conservative", 6, 90), 45),
    ("run_bd3lm_b192", lambda s: step_run_bd3lm(s, "bd3lm_b192", "aggressive", 6, 90), 45),
    ("run_hdp", step_run_hdp, 45),
    ("run_gnn", step_run_gnn, 30),
    ("rl_logprob", step_rl_logprob, 25),
    ("run_grpo", step_run_grpo, 100),
    ("run_grpo_dynamic", step_run_grpo_dynamic, 100),
    ("run_grpo_packed", step_run_grpo_packed, 100),
    ("numerics", step_numerics, 20),
    ("bench_no_expandable", step_bench_no_expandable, 50),
    ("bench_padded", step_bench_padded, 50),
    ("bench_fast", step_bench_fast, 60),
    ("bench_shared_mod", step_bench_shared_mod, 50),
    ("bench_compiled_ce", step_bench_compiled_ce, 50),
    ("bench_autotune", step_bench_autotune, 100),
    ("rl_logprob_flex", step_rl_logprob_flex, 40),
    ("rl_generate", step_rl_generate, 45),
]


def install_wheels(s: Suite) -> None:
    if s.bundle is None:
        return
    wheels = sorted(glob.glob(str(s.bundle / "wheels" / "*.whl")))
    res = s.run("wheels", [s.py, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                           "--target", str(s.work / "site"), *wheels], 90)
    s.emit("wheels", ok=res["ok"], rc=res["rc"], wheels=[Path(w).name for w in wheels],
           error_tail=None if res["ok"] else tail(res["_lines"]))


SUMMARY_COLS = [("step", 26), ("ok", 5), ("wall_s", 7), ("pred_step_s", 11), ("meas_step_s", 11), ("ratio_step", 10),
                ("pred_mem_gib", 12), ("meas_alloc_gib", 14), ("meas_reserved_gib", 17), ("ratio_alloc", 11),
                ("mfu", 7)]


def _fmt(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def summarize(results: Path) -> str:
    rows = []
    for line in results.read_text().splitlines():
        with contextlib.suppress(ValueError):
            rows.append(json.loads(line))
    out = ["  ".join(name.ljust(w) for name, w in SUMMARY_COLS)]
    for r in rows:
        if r.get("step") in ("start", "end"):
            continue
        r = {**r, "mfu": r.get("mfu", r.get("metric_mfu_median"))}
        cells = []
        for name, w in SUMMARY_COLS:
            v = r.get(name)
            v = "" if v is None else (f"{v:.4g}" if isinstance(v, float) else str(v))
            cells.append(v[:w].ljust(w))
        out.append("  ".join(cells).rstrip())
        if r.get("meas_rollout_s") is not None:  # an RL job: the figures a planner row needs, on one line
            out.append(f"    rl: steps {r.get('meas_step_times_s')} s, steady {_fmt(r.get('meas_steady_step_s'))} s, "
                       f"warm-up {_fmt(r.get('meas_warmup_s'))} s (compile {_fmt(r.get('meas_compile_s'))} s), "
                       f"rollout {_fmt(r.get('meas_rollout_s'))} / pred {_fmt(r.get('pred_rollout_s'))} s, "
                       f"{_fmt(r.get('meas_rollout_tokens_per_s'))} tokens/s, memory at {r.get('meas_mem_at')}")
        for extra in ("skipped", "driver_error", "error_tail", "oom", "resolved", "top_kernels"):
            if r.get(extra):
                out.append(f"    {extra}: {json.dumps(r[extra])[:400]}")
    return "\n".join(out) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "gpu_suite_out"))
    ap.add_argument("--bundle", default=None, help="folder gpu_bundle.sh built (wheels/, hf/, COMMIT)")
    ap.add_argument("--budget", type=float, default=330.0, help="seconds for all steps together")
    ap.add_argument("--steps", default=os.environ.get("GPU_SUITE_STEPS", ""),
                    help="comma-separated step names, in the order to run them (default: all, priority order)")
    ap.add_argument("--cpu", action="store_true", help="smoke form even where CUDA is available")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="gpu_suite."))
    bundle = Path(a.bundle).resolve() if a.bundle else None
    known = {name: (fn, need) for name, fn, need in STEPS}
    chosen = [x for x in a.steps.split(",") if x] or [name for name, _, _ in STEPS]
    unknown = [x for x in chosen if x not in known]
    if unknown:
        print(f"gpu_suite: unknown step(s) {', '.join(unknown)}; known: {', '.join(known)}", file=sys.stderr)
        return 2
    probe = subprocess.run([sys.executable, "-c", "import torch,sys; sys.exit(0 if torch.cuda.is_available() else 1)"],
                           capture_output=True, timeout=120)
    s = Suite(out, work, a.budget, gpu=probe.returncode == 0 and not a.cpu, bundle=bundle)
    s.emit("start", mode="gpu" if s.gpu else "cpu-smoke", budget_s=a.budget, steps=chosen, python=s.py)
    install_wheels(s)
    step_env(s)
    for name in chosen:
        fn, need = known[name]
        if s.left() < need:
            s.emit(name, ok=False, skipped=f"{s.left():.0f} s left of the budget, needs {need:.0f} s")
            continue
        try:
            fn(s)
        except Exception as exc:  # a bug in one step must not stop the next
            s.emit(name, ok=False, driver_error=f"{type(exc).__name__}: {exc}"[:500])
        s.save_side()
    s.emit("end", wall_s=round(time.monotonic() - T0, 1))
    s.save_side()
    table = summarize(out / "results.jsonl")
    (out / "summary.txt").write_text(table)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
