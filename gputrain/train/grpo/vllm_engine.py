"""Colocated vLLM rollouts for the GRPO core: one vLLM ``LLM`` per rank, inside the training process.

Colocated (TRL's ``vllm_mode="colocate"``): every rank builds its own engine with
``distributed_executor_backend="external_launcher"`` (vLLM joins the torchrun process group instead of
spawning workers), tensor parallel size 1, ``gpu_memory_utilization`` from the plan
(``memory.vllm_gpu_memory_utilization``), dtype from the run's precision (fp16 on V100, bf16 elsewhere),
``max_model_len`` = max prompt + max completion, seed ``train.seed + rank``. Each rank generates its own
prompts (already repeated G times, ``n=1`` each; vLLM's prefix cache shares the repeated prompt), and the
token lists become a :class:`~gputrain.train.grpo.rollout.Rollout` through the same pure function tests pin
against HF ``generate`` (``rollout_from_token_ids``). Evaluation stays on HF ``generate`` on rank 0: it is
rank-0-only and must not depend on whether this engine is on.

Weights: after the optimizer updates of a step and before the next rollout (and once after start or resume),
:meth:`VLLMEngine.sync_weights` walks the policy's parameters one at a time -- DDP: the module's own tensors;
FSDP2: ``DTensor.full_tensor()``, an all-gather every rank joins in the same order -- renames them to the
Hugging Face checkpoint names vLLM's ``load_weights`` expects (:func:`hf_param_name`) and loads each through
``LLM.apply_model`` (public; in-process under ``external_launcher``, which forces
``VLLM_ENABLE_V1_MULTIPROCESSING=0``: the executor calls the function on its one worker directly, so nothing
is pickled and ``VLLM_ALLOW_INSECURE_SERIALIZATION`` is not needed). vLLM
versions without ``apply_model`` fall back to the engine's driver worker, TRL 1.16's route; neither: a
clear error. The prefix cache is reset after every sync (cached KV was computed with the old weights).
Sleep mode (``algorithm.vllm_sleep_mode``, where the installed vLLM supports it): level 2 after each
rollout frees the KV cache and weights while training (their contents are lost, not offloaded); the next
sync wakes the weights' memory and re-pushes every weight, the next rollout wakes the KV cache. A rollout
with the weights still asleep is refused: vLLM would run on discarded memory (older versions) or wait
forever on its paused scheduler (newer ones resume scheduling only once everything is awake).

Stopping: on the run's stop ids (``prompts.stop_token_ids``: the tokenizer's EOS and every EOS id of the
checkpoint's generation config), like HF ``generate`` here (:func:`sampling_kwargs`); vLLM keeps the stop
token at the end of ``token_ids``, so the completion mask includes it as HF's does.

Why not TRL's ``VLLMGeneration``: it needs an accelerate ``Accelerator`` and reads the sharding from
``accelerator.state``. This core shards with torch's ``fully_shard`` directly (accelerate's FSDP plugin does
not shard on CPU), so TRL's class would see "no FSDP" and hand vLLM each rank's local
DTensor shard instead of the full weight. It also builds the engine from ``model.name_or_path``, which is
empty for the config-built tiny model. What it does well is followed here: external launcher, per-rank seed,
parameter-by-parameter gathering, prefix-cache reset, sleep level 2 with ``wake_up(tags=...)``.

vLLM is imported only inside :class:`VLLMEngine` (CLI start-up, CPU machines). Check on a GPU with vLLM::

    gputrain run recipes/grpo_math_fsdp.yaml --gpus 2 --set algorithm.rollout_engine=vllm \\
        --set memory.vllm_gpu_memory_utilization=0.3
"""

from __future__ import annotations

import dataclasses
import os
import socket
from collections.abc import Collection, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import torch

from gputrain.errors import GputrainError
from gputrain.train.grpo.rollout import Rollout, rollout_from_token_ids, tokenize_prompts
from gputrain.train.grpo.sharding import unwrap

# Segments wrappers insert into parameter names: activation checkpointing, FSDP1, torch.compile's OptimizedModule.
WRAPPER_SEGMENTS = ("_checkpoint_wrapped_module.", "_fsdp_wrapped_module.", "_orig_mod.")
VLLM_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
# LLM(...) keywords that only some vLLM versions know; dropped (with a note) where EngineArgs lacks them.
OPTIONAL_ENGINE_ARGS = ("enable_sleep_mode", "generation_config", "logprobs_mode")


def hf_param_name(name: str) -> str:
    """The Hugging Face checkpoint name of a (possibly wrapped) policy parameter.

    Drops wrapper segments wherever they sit and DDP's leading ``module.`` (only at the start: a layer may
    legitimately be called ``...module.``).
    """
    for segment in WRAPPER_SEGMENTS:
        name = name.replace(segment, "")
    while name.startswith("module."):
        name = name[len("module.") :]
    return name


def iter_full_weights(model: torch.nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """(HF name, full tensor) per parameter, one at a time, so at most one gathered weight is alive.

    Under FSDP2 each ``full_tensor()`` is an all-gather: every rank must run this loop to the end, in the
    same order (``named_parameters`` order is identical on all ranks). Tied weights come once, under the
    name ``named_parameters`` gives them (the input embedding), which is what vLLM's loaders expect.
    """
    from torch.distributed.tensor import DTensor

    for name, param in model.named_parameters():
        tensor = param.full_tensor() if isinstance(param, DTensor) else param
        yield hf_param_name(name), tensor.detach()


def sampling_kwargs(
    *,
    temperature: float,
    top_p: float,
    top_k: int | None,
    max_tokens: int,
    eos_ids: int | Sequence[int],
    n: int = 1,
    seed: int | None = None,
) -> dict[str, Any]:
    """Keywords for ``vllm.SamplingParams`` matching :func:`~gputrain.train.grpo.rollout.generate`'s sampling.

    ``temperature == 0`` is greedy (top-p/top-k off, as HF's ``do_sample=False``); ``top_k=None`` is -1,
    "off" in every vLLM version (newer ones prefer 0 but accept -1). Stopping is on exactly ``eos_ids``
    (the run's stop ids, the same HF ``generate`` gets): ``stop_token_ids=eos_ids`` with
    ``ignore_eos=True``, so vLLM's own EOS bookkeeping cannot add or drop one and every row ends on a token
    the rollout counts as EOS. ``ignore_eos`` only skips vLLM's own EOS checks: a token in
    ``stop_token_ids`` still ends the request and stays the last of its ``token_ids``. ``logprobs=0``
    returns the sampled token's log-prob under vLLM (for the importance-sampling correction). Token ids
    only (``detokenize=False``): texts are decoded by the rollout conversion. ``seed`` seeds each request:
    leave it None when prompts are repeated with
    ``n=1``, or the G copies of a prompt would all sample the same completion (the engine's per-rank
    seed already makes runs reproducible).
    """
    greedy = temperature == 0
    kwargs: dict[str, Any] = {
        "n": n,
        "temperature": 0.0 if greedy else float(temperature),
        "top_p": 1.0 if greedy else float(top_p),
        "top_k": -1 if (greedy or not top_k) else int(top_k),
        "max_tokens": int(max_tokens),
        "stop_token_ids": [int(eos_ids)] if isinstance(eos_ids, int) else [int(i) for i in eos_ids],
        "ignore_eos": True,
        "detokenize": False,
        "logprobs": 0,
    }
    if seed is not None:
        kwargs["seed"] = int(seed)
    return kwargs


def llm_kwargs(
    source: str,
    *,
    load_format: str,
    precision: str,
    gpu_memory_utilization: float,
    max_model_len: int,
    seed: int,
    sleep_mode: bool,
    supported: Collection[str] | None = None,
) -> tuple[dict[str, Any], list[str]]:
    """(keywords for ``vllm.LLM``, notes): the colocated engine, filtered to what this vLLM accepts.

    ``supported`` is the set of ``EngineArgs`` field names (None: keep everything). Optional keywords
    (sleep mode; ``generation_config="vllm"``, vLLM's neutral sampling defaults instead of the
    checkpoint's -- they only apply to calls without ``SamplingParams``, and do not keep the checkpoint's
    EOS ids out of the stop tokens: :func:`sampling_kwargs` does that) are dropped with a note where
    unsupported; a missing required one (``external_launcher``'s keyword) is an error, as the engine could
    not run colocated. ``seed`` is required by ``external_launcher``; building the engine reseeds this
    process's global RNGs with it (no worker process), so the caller reseeds after construction.
    """
    if precision not in VLLM_DTYPES:
        raise GputrainError(f"vLLM rollouts: unknown precision {precision!r} (expected bf16, fp16 or fp32)")
    kwargs: dict[str, Any] = {
        "model": source,
        "load_format": load_format,
        "dtype": VLLM_DTYPES[precision],
        "gpu_memory_utilization": float(gpu_memory_utilization),
        "max_model_len": int(max_model_len),
        "seed": int(seed),
        "tensor_parallel_size": 1,
        "distributed_executor_backend": "external_launcher",
        "enable_sleep_mode": bool(sleep_mode),
        "generation_config": "vllm",
        # the sampled token's log-prob after temperature/top-p, the distribution the loss's logp_old is of
        "logprobs_mode": "processed_logprobs",
    }
    notes: list[str] = []
    if supported is not None:
        for key in list(kwargs):
            if key in supported:
                continue
            if key not in OPTIONAL_ENGINE_ARGS:
                raise GputrainError(
                    f"the installed vLLM has no LLM({key}=...): colocated rollouts need a newer vLLM "
                    "(pip install -U 'gputrain[gpu]') or set algorithm.rollout_engine: hf"
                )
            if key == "enable_sleep_mode" and sleep_mode:
                notes.append("sleep mode not supported by this vLLM: the engine stays awake while training")
            if key == "logprobs_mode":
                notes.append("no logprobs_mode in this vLLM: its log-probs are raw, the IS correction is off")
            del kwargs[key]
    return kwargs, notes


def model_source(model: torch.nn.Module, tokenizer: Any, workdir: Path) -> tuple[str, str]:
    """(what vLLM loads, load format): the checkpoint name, or a folder with config + tokenizer only.

    A policy built from a config (the tiny model) has no checkpoint: its config and tokenizer are written to
    ``workdir`` and vLLM starts from ``load_format="dummy"`` weights; the first :meth:`VLLMEngine.sync_weights`
    (always before the first rollout) puts the real ones in.
    """
    hf = unwrap(model)
    name = str(getattr(getattr(hf, "config", None), "_name_or_path", "") or "")
    if name:
        return name, "auto"
    workdir.mkdir(parents=True, exist_ok=True)
    hf.config.save_pretrained(workdir)  # type: ignore[union-attr,operator]
    tokenizer.save_pretrained(workdir)
    return str(workdir), "dummy"


def _ensure_launcher_env(rank: int, local_rank: int, world_size: int) -> None:
    """The variables ``external_launcher`` reads; torchrun sets them, a bare single-process run may not."""
    os.environ.setdefault("RANK", str(rank))
    os.environ.setdefault("LOCAL_RANK", str(local_rank))
    os.environ.setdefault("WORLD_SIZE", str(world_size))
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    if "MASTER_PORT" not in os.environ:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            os.environ["MASTER_PORT"] = str(s.getsockname()[1])
    # The engine must live in this process: weights are handed over as tensors, not serialized.
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"


class VLLMEngine:
    """One colocated vLLM engine on this rank (see the module docstring)."""

    def __init__(
        self,
        model: torch.nn.Module,
        tokenizer: Any,
        *,
        workdir: Path,
        precision: str,
        gpu_memory_utilization: float,
        max_model_len: int,
        seed: int,
        rank: int,
        local_rank: int,
        world_size: int,
        sleep_mode: bool = False,
    ) -> None:
        try:
            import vllm
            from vllm.engine.arg_utils import EngineArgs
        except ImportError as exc:
            raise GputrainError(
                f"vLLM rollouts: cannot import vllm ({exc}); pip install 'gputrain[gpu]' "
                "or set algorithm.rollout_engine: hf"
            ) from exc
        _ensure_launcher_env(rank, local_rank, world_size)
        source, load_format = model_source(model, tokenizer, workdir / f"vllm_model_rank{rank}")
        supported = {f.name for f in dataclasses.fields(EngineArgs)}
        kwargs, self.notes = llm_kwargs(
            source,
            load_format=load_format,
            precision=precision,
            gpu_memory_utilization=gpu_memory_utilization,
            max_model_len=max_model_len,
            seed=seed + rank,
            sleep_mode=sleep_mode,
            supported=supported,
        )
        self.version = str(getattr(vllm, "__version__", "?"))
        self._sampling_cls = vllm.SamplingParams
        self.llm = vllm.LLM(**kwargs)
        self.sleep_mode = bool(kwargs.get("enable_sleep_mode"))
        self._asleep: set[str] = set()  # tags discarded by the last sleep, waiting for wake_up
        self.processed_logprobs = "logprobs_mode" in kwargs
        self.pad_id = int(tokenizer.pad_token_id)

    def _load(self, weights: list[tuple[str, torch.Tensor]]) -> None:
        def load(vllm_model: Any) -> None:
            vllm_model.load_weights(weights)

        apply_model = getattr(self.llm, "apply_model", None)
        if apply_model is not None:
            apply_model(load)
            return
        try:
            runner_model = self.llm.llm_engine.model_executor.driver_worker.model_runner.model
        except AttributeError as exc:
            raise GputrainError(
                f"vLLM {self.version}: no LLM.apply_model and no driver worker to load weights into; "
                "use a vLLM with LLM.apply_model or set algorithm.rollout_engine: hf"
            ) from exc
        load(runner_model)

    def _wake(self, tags: Iterable[str]) -> None:
        wanted = [t for t in tags if t in self._asleep]
        if not wanted:
            return
        try:
            self.llm.wake_up(tags=wanted)
            self._asleep -= set(wanted)
        except TypeError:  # vLLM before wake_up(tags=...): everything at once
            self.llm.wake_up()
            self._asleep.clear()

    def _sleep(self) -> None:
        """Level 2: drop KV cache and weights while training (weights are re-pushed at the next sync)."""
        if self.sleep_mode:
            self.llm.sleep(level=2)
            self._asleep = {"weights", "kv_cache"}

    def sync_weights(self, model: torch.nn.Module) -> int:
        """Push the policy's current weights into vLLM; every rank must call it (FSDP2 gathers). Returns the count."""
        if self._asleep and torch.cuda.is_available():
            torch.cuda.empty_cache()  # give the training step's cached blocks back before vLLM maps its weights
        self._wake(["weights"])
        count = 0
        with torch.no_grad():
            for name, tensor in iter_full_weights(model):
                self._load([(name, tensor)])
                count += 1
        reset = getattr(self.llm, "reset_prefix_cache", None)
        if reset is not None:
            reset()
        return count

    def generate(
        self,
        tokenizer: Any,
        prompts: list[str],
        *,
        max_prompt_length: int,
        max_new_tokens: int,
        temperature: float,
        top_p: float = 1.0,
        top_k: int | None = None,
        device: torch.device,
        eos_ids: Sequence[int] | None = None,
        add_special_tokens: bool = True,
    ) -> Rollout:
        """One completion per prompt string, as :func:`~gputrain.train.grpo.rollout.generate` returns it, plus
        vLLM's own log-prob of each sampled token (``sampler_logps``, where this vLLM reports processed ones).

        Prompts are tokenized exactly as the HF path does (left truncation to ``max_prompt_length``), then
        handed to vLLM as token ids without their padding.
        """
        stops = list(eos_ids) if eos_ids else [int(tokenizer.eos_token_id)]
        ids, mask = tokenize_prompts(tokenizer, prompts, max_prompt_length, torch.device("cpu"), add_special_tokens)
        prompt_lists = [row[m.bool()].tolist() for row, m in zip(ids, mask, strict=True)]
        params = self._sampling_cls(
            **sampling_kwargs(
                temperature=temperature, top_p=top_p, top_k=top_k, max_tokens=max_new_tokens, eos_ids=stops
            )
        )
        if "weights" in self._asleep:
            raise GputrainError(
                "vLLM rollouts: the engine's weights were discarded by sleep mode and not re-pushed; "
                "call sync_weights before generate"
            )
        self._wake(["kv_cache"])
        outputs = self.llm.generate(
            [{"prompt_token_ids": p} for p in prompt_lists], sampling_params=params, use_tqdm=False
        )
        self._sleep()
        completions = [list(out.outputs[0].token_ids) for out in outputs]
        roll = rollout_from_token_ids(
            prompt_lists,
            completions,
            eos_ids=stops,
            pad_id=self.pad_id,
            decode=lambda t: tokenizer.batch_decode(t, skip_special_tokens=True),
            device=device,
        )
        if self.processed_logprobs:
            per_row = [sampled_logprobs(out.outputs[0].token_ids, out.outputs[0].logprobs) for out in outputs]
            roll.sampler_logps = sampler_logps_tensor(per_row, roll.completion_ids.size(1)).to(device)
        return roll


def sampled_logprobs(token_ids: Sequence[int], logprobs: Any) -> list[float]:
    """The log-prob vLLM gave each sampled token (``SamplingParams(logprobs=0)``: one dict per position,
    token id → ``Logprob``); NaN where it gave none."""
    out: list[float] = []
    for i, token in enumerate(token_ids):
        entry = logprobs[i].get(token) if logprobs is not None and i < len(logprobs) else None
        value = getattr(entry, "logprob", entry)
        out.append(float(value) if value is not None else float("nan"))
    return out


def sampler_logps_tensor(rows: Sequence[Sequence[float]], width: int) -> torch.Tensor:
    """``[B, width]`` float32, right-padded with NaN (masked out of the IS weights); an empty row stays NaN."""
    table = torch.full((len(rows), width), float("nan"), dtype=torch.float32)
    for i, row in enumerate(rows):
        n = min(len(row), width)
        if n:
            table[i, :n] = torch.tensor(list(row[:n]), dtype=torch.float32)
    return table


def engine_from_context(ctx: Any, model: torch.nn.Module, tokenizer: Any, algo: Any) -> VLLMEngine:
    """The engine for a run: memory share, precision, lengths and seed from the resolved plan."""
    share = ctx.recipe.memory.vllm_gpu_memory_utilization
    if share is None:  # pick_engine refuses this already; kept for callers that skip it
        raise GputrainError("vLLM rollouts need memory.vllm_gpu_memory_utilization in the plan")
    return VLLMEngine(
        model,
        tokenizer,
        workdir=Path(ctx.job_dir),
        precision=ctx.precision.name,
        gpu_memory_utilization=float(share),
        max_model_len=algo.max_prompt_length + algo.max_completion_length,
        seed=ctx.seed,
        rank=ctx.rank,
        local_rank=ctx.local_rank,
        world_size=ctx.world_size,
        sleep_mode=algo.vllm_sleep_mode,
    )
