"""RL step model (grpo_code, grpo_math, gdpo): rollout, old/reference log-probs, updates, weight sync, reward.

One step as ``gputrain.train.grpo.trainer`` runs it: ``train_batch_size`` prompts (verl semantics, global)
× ``num_generations`` completions, split over the ranks; every rank generates its share in one batch (HF
``generate``) or through a colocated vLLM engine; the old-policy log-probs are computed when there is more
than one update per rollout, the reference log-probs when ``beta > 0``; then ``num_iterations`` passes in
mini-batches of ``ppo_mini_batch_size`` prompts, each an optimizer update over micro-batches of
``train.batch_size`` completions. Tensors are padded to the batch's longest prompt and completion.

Decode is bounded per token by the larger of memory traffic (weights + the KV cache read once), compute,
and host dispatch (eager HF: 72 operators per layer and 64 per step, plus FSDP2's forward hooks on every
wrapped module when the policy is sharded, ``physics``; HF with the static KV cache, ``algorithm.generate_cache``
as the one resolver decides it for the plan's GPU: a compiled decode step replayed as a CUDA graph, the whole
fixed-size cache read per step, its compile charged as start-up; vLLM: CUDA graphs, or eager launches where the run
sets ``algorithm.vllm_enforce_eager``, as verl did by default up to v0.5). HF ``generate`` keeps every
sequence until the longest stops; vLLM batches continuously, so its tail (the longest completions) runs at
small batch. vLLM holds ``share × device memory`` for weights and KV cache; a rollout that does not fit its
KV cache runs in waves.

Run overheads (in the total, not the step, as the trainer's steady step time excludes them): start-up, with
FlexAttention's compile where the packed passes run through it (``algorithm.sequence_packing`` on a GPU the
kernel resolver gives flex, ``flex_compile_seconds``); every ``eval_every`` steps and at the end, rank 0
alone generates ``eval_samples`` greedy completions with HF ``generate`` in one batch (whatever the rollout
engine) and scores them; every ``save_every`` steps and at the end, a full checkpoint (fp32 weights + AdamW
moments, gathered to rank 0) is written.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gputrain.contract.kernels import flex_blocker, resolve_generate_cache
from gputrain.errors import PlanError
from gputrain.planner import physics, sglang_fit
from gputrain.planner.kernels import catalog_facts
from gputrain.planner.memory_terms import grad_bytes
from gputrain.planner.moe import moe_note, moe_relative_efficiency
from gputrain.planner.parallel import layout, rollout_gpus
from gputrain.planner.vllm_fit import MAX_WAVES, check_share, kv_cache_bytes
from gputrain.planner.workload import CHECKPOINT_BYTES_PER_S, Hardware, StepModel, startup_seconds
from gputrain.recipe.algorithms.grpo import GRPOAlgorithm
from gputrain.recipe.entrypoints import entrypoint_of
from gputrain.recipe.plan_only import plan_only_fields
from gputrain.recipe.schema import Recipe

#: a sandboxed program (fresh interpreter, the asserts) takes this long per completion, seconds
SANDBOX_PROGRAM_SECONDS = 0.15
#: math-verify / format checks per completion, seconds
CHECK_SECONDS = 0.002
#: how fast a sleeping engine gives its memory share back to the driver, bytes/s. vLLM's sleep mode allocates the
#: share (weights and KV cache) through ``CuMemAllocator`` (vllm/device_allocator/cumem.py), and ``sleep`` unmaps and
#: releases every one of its allocations (``unmap_and_release``: cuMemUnmap + cuMemRelease), ``wake_up`` creates
#: and maps them again (``create_and_map``); SGLang's ``release_memory_occupation`` does the same through
#: torch_memory_saver. Measured, not fitted: vLLM's own log in TRL issue 4086 (level 2, nothing copied to the
#: host) reads "Sleep mode freed 51.57 GiB memory" with "It took 1.460260 / 1.503160 / 1.600564 seconds to fall
#: asleep", 51.57 GiB / 1.52 s; wake-up maps the same bytes back and is priced at the same rate
CUMEM_RELEASE_BYTES_PER_S = 51.57 * 2**30 / 1.521
#: AdamW on the host with CPU offload (DeepSpeed's CPU Adam streams the fp32 states), bytes/s
HOST_OPTIMIZER_BYTES_PER_S = 2e10
#: per-tensor host cost of pushing one weight into vLLM (load_weights), seconds
SYNC_TENSOR_SECONDS = 5e-5
#: NCCL's latency model of a small all-reduce (LL protocol), microseconds: src/graph/tuning.cc at NVIDIA/nccl
#: 01afd20 (``baseLat``, ``hwLat``, ``ncclTopoTuneModel``): base latency of the ring and the tree, per-hop latency
#: over NVLink and over the network; a ring pays one hop per step (2(n-1) steps, 2(nodes-1) of them between nodes),
#: a tree 2((n/nodes - 1) intra + log2(nodes) inter); NCCL runs the faster one
NCCL_BASE_US = {"ring": 3.6, "tree": 4.4}
NCCL_NVLINK_HOP_US = {"ring": 0.47, "tree": 0.52}
NCCL_NET_HOP_US = {"ring": 2.7, "tree": 5.0}
#: gloo over loopback on one machine, bytes/s (CPU runs)
LOOPBACK_BYTES_PER_S = 2e9
#: FlexAttention's first compile in the packed passes (transformers compiles it on its first call) and one
#: recompile when a step brings a new bin shape (dynamo's automatic dynamic shapes), seconds, charged once as
#: start-up: measured on one H100 2026-11-27 (benchmarks/RESULTS.md, 0.5B GRPO, bf16): the first three steps
#: took 46.1 / 22.0 / 8.59 s packed against 32.4 / 9.69 / 8.53 s padded, so 46.1 - 32.4 and 22.0 - 9.7
FLEX_COMPILE_SECONDS, FLEX_RECOMPILE_SECONDS = 14.0, 12.0
#: HF generate's decode step compiled for the static KV cache (``algorithm.generate_cache``), charged once as
#: start-up: measured on one H200 2026-11-27 (benchmarks/RESULTS.md, ``rl_logprob_bench.py --generate-only
#: --gen-rows 64 --new-tokens 256``, 0.5B bf16): the static cache's first call took 24.7 s against 0.943 s for
#: the next, same shape, so ~23.8 s of compile and CUDA-graph capture
GENERATE_COMPILE_SECONDS = 23.8
#: FlexAttention's block (``train.grpo.packing_flex.FLEX_BLOCK``): the packed bins' width is a multiple of it
FLEX_BLOCK = 128
#: pinned host <-> device copies (PCIe 5 x16: 64 GB/s a direction at peak), bytes/s: assumed, not measured here
HOST_COPY_BYTES_PER_S = 2.5e10


#: rollout engines that run beside the trainer with their own memory share, CUDA graphs and weight sync
ENGINES = ("vllm", "sglang")


@dataclass(frozen=True)
class RLShape:
    """Batch geometry of one RL step, per rank (what both the time and the memory models read)."""

    prompts: int            # train_batch_size, global
    mini_prompts: int       # ppo_mini_batch_size, global
    generations: int
    seqs: int               # completions per rank per step
    micro: int              # completions per forward/backward
    prompt_tokens: float    # expected prompt length
    prompt_pad: float       # padded prompt length (longest in the batch)
    completion: float       # expected completion length
    completion_max: int
    engine: str             # hf | vllm | sglang
    share: float | None     # the engine's memory share (vLLM's, or SGLang's mem_fraction_static)
    packed: bool = False    # log-prob/update passes on packed sequences (no padding)
    bin_width: int = 0      # FlexAttention's packed bin (the padded width rounded up to 128); 0: eager packer
    cache: str = "dynamic"  # HF generate's KV cache (contract.kernels.resolve_generate_cache)
    prompt_bucket: int = 0  # the static cache's prompt width: max_prompt_length (prompts left-padded to it)

    @property
    def cache_tokens(self) -> float:
        """Tokens per sequence HF generate's KV cache holds: the batch's padded length, or with the static cache
        its fixed bucket + ``max_completion_length`` (allocated whole, read whole by every decode step)."""
        return self.prompt_bucket + self.completion_max if self.cache == "static" else self.padded

    @property
    def padded(self) -> float:
        return self.prompt_pad + self.completion_max

    @property
    def real_tokens(self) -> float:
        """A sequence's expected real tokens (prompt + completion, no padding)."""
        return self.prompt_tokens + self.completion

    @property
    def train_tokens(self) -> float:
        """Tokens per sequence that the log-prob and update passes compute on: the padded width; packed, the real
        tokens, and under FlexAttention the micro-batch's bins × their fill rounded up to the 128-token block
        (``packed_pass.processed_tokens``: every bin runs at the fullest one's block width; never more than
        padded). The bins are as few as the real tokens allow (lengths that vary pack that well)."""
        if not self.packed:
            return self.padded
        if not self.bin_width:
            return self.real_tokens
        rows = max(1, min(self.micro, self.seqs))
        bins = math.ceil(rows * self.real_tokens / self.bin_width)
        width = -(-math.ceil(rows * self.real_tokens / bins) // FLEX_BLOCK) * FLEX_BLOCK
        return min(self.padded, bins * width / rows)

    @property
    def updates(self) -> int:
        return self.prompts // self.mini_prompts

    @property
    def micro_per_update(self) -> int:
        return max(1, math.ceil(self.seqs / self.updates / self.micro))


def step_prompts(algo: GRPOAlgorithm, micro: int, world: int) -> tuple[int, int]:
    """(prompts per rollout step, prompts per update), global: the one home of this arithmetic (the plan
    stores its values through :func:`with_step_prompts`; the trainer reads them, ``plan --compare`` shows them)."""
    prompts = algo.train_batch_size or world * max(1, micro // algo.num_generations)
    return prompts, algo.ppo_mini_batch_size or prompts


def with_step_prompts(recipe: Recipe, world: int) -> Recipe:
    """``recipe`` with an RL algorithm's ``train_batch_size`` and ``ppo_mini_batch_size`` resolved for
    ``world`` ranks (other recipes unchanged): what the plan stores, so the trainer never redoes the sum."""
    algo = recipe.algorithm
    if not isinstance(algo, GRPOAlgorithm):
        return recipe
    prompts, mini = step_prompts(algo, recipe.train.batch_size, world)
    resolved = algo.model_copy(update={"train_batch_size": prompts, "ppo_mini_batch_size": mini})
    return recipe.model_copy(update={"algorithm": resolved})


def rl_shape(recipe: Recipe, hw: Hardware) -> RLShape:
    algo = recipe.algorithm
    assert isinstance(algo, GRPOAlgorithm)
    micro = recipe.train.batch_size
    train_world = layout(recipe, hw.world).train_world
    prompts, mini = step_prompts(algo, micro, hw.world)
    share = recipe.memory.vllm_gpu_memory_utilization
    engine = algo.rollout_engine
    if engine == "auto":
        engine = "vllm" if (share is not None and not hw.gpu.is_cpu) else "hf"
    if engine == "sglang":
        if hw.gpu.is_cpu or not hw.gpu.memory_gib:
            raise PlanError(f"algorithm.rollout_engine=sglang needs a GPU and this plan is for {hw.gpu.name}: plan "
                            "it for one (--gpu H100) or set algorithm.rollout_engine=hf")
        share = sglang_fit.share_of(recipe, hw)
    seqs = max(1, prompts * algo.num_generations // train_world)
    prompt = recipe.estimate.prompt_fraction * algo.max_prompt_length
    pad = min(float(algo.max_prompt_length), prompt * (1.5 if seqs > 1 else 1.0))
    # the 128-aligned bins are this trainer's FlexAttention packer (train.grpo.packed_pass); a recipe with a field
    # only the planner knows describes another framework's trainer, whose packing (verl's remove-padding, NeMo
    # RL's) has no such bins
    flex = (algo.sequence_packing and flex_blocker(catalog_facts(hw.gpu)) is None
            and not plan_only_fields(recipe))
    width = pad + algo.max_completion_length
    return RLShape(prompts, mini, algo.num_generations, seqs, micro, prompt, pad,
                   recipe.estimate.completion_fraction * algo.max_completion_length, algo.max_completion_length,
                   engine, share, algo.sequence_packing,
                   -(-math.ceil(width) // FLEX_BLOCK) * FLEX_BLOCK if flex else 0,
                   generate_cache(recipe, hw)[0] if engine == "hf" else "dynamic", algo.max_prompt_length)


#: share of the dense peak reached by the prefill, log-prob and update passes when the recipe states none:
#: torchtitan's published 33-39 % for FSDP training of 8B on H100 (``reference/seed-figures.md``), with
#: the range 20-50 % carried into the step's range (``estimate.step_range_seconds``)
RL_EFFICIENCY, RL_EFFICIENCY_RANGE = 0.35, (0.2, 0.5)


def efficiency(recipe: Recipe) -> float:
    """``estimate.mfu`` where the recipe (or ``--set``) states it, an override shown as assumed; else
    :data:`RL_EFFICIENCY`."""
    return recipe.estimate.mfu if "mfu" in recipe.estimate.model_fields_set else RL_EFFICIENCY


def train_efficiency(recipe: Recipe, hw: Hardware) -> float:
    """Efficiency of the log-prob and update passes: :func:`efficiency`, times the published shortfall of the
    mixture-of-experts training path for a MoE model (``planner.moe``) unless the recipe states ``estimate.mfu``."""
    if "mfu" in recipe.estimate.model_fields_set:
        return efficiency(recipe)
    return efficiency(recipe) * moe_relative_efficiency(recipe, hw.gpu)


def _fsdp_hooks(recipe: Recipe, hw: Hardware) -> bool:
    """HF generate on a sharded policy: FSDP2's hooks run on every decode step (the weights are gathered)."""
    return recipe.distributed.strategy == "fsdp" and hw.world > 1


def hf_decode_host_seconds(recipe: Recipe, hw: Hardware) -> float:
    """Host time of one eager HF decode step: its operators, plus FSDP2's per-module hooks when sharded."""
    layers = recipe.model.num_layers or 1
    host = (layers * physics.HF_OPS_PER_LAYER + physics.HF_OPS_PER_TOKEN) * hw.op_seconds
    if _fsdp_hooks(recipe, hw):
        host += (layers + 1) * physics.FSDP2_HOOK_SECONDS
    return host


def tp_allreduce_seconds(hw: Hardware, tp: int) -> float:
    """One small all-reduce among the ``tp`` GPUs of an engine, by NCCL's latency model
    (:data:`NCCL_BASE_US`): NVLink hops within the link domain, network hops between domains (vLLM's
    RowParallelLinear all-reduces its output on the compute stream: an engine spread over nodes pays the
    network's latency twice per layer per decode step)."""
    if tp <= 1:
        return 0.0
    nodes = max(1, math.ceil(tp / hw.link_domain))
    ranks_per_node = tp // nodes
    intra = {a: lat * (1.8 if nodes > 1 else 1.0) for a, lat in NCCL_NVLINK_HOP_US.items()}  # NCCL's LL discount
    steps, inter_steps = 2 * (tp - 1), 2 * (nodes - 1)
    ring = NCCL_BASE_US["ring"] + (steps - inter_steps) * intra["ring"] + inter_steps * NCCL_NET_HOP_US["ring"]
    tree = NCCL_BASE_US["tree"] + 2 * ((ranks_per_node - 1) * intra["tree"]
                                       + math.log2(nodes) * NCCL_NET_HOP_US["tree"])
    return min(ring, tree) * 1e-6


def generate_cache(recipe: Recipe, hw: Hardware) -> tuple[str, str]:
    """(HF generate's KV cache, why) for the plan's GPU: the trainer's own decision
    (``contract.kernels.resolve_generate_cache``) on the catalog's facts."""
    algo = recipe.algorithm
    requested = algo.generate_cache if isinstance(algo, GRPOAlgorithm) else "dynamic"
    return resolve_generate_cache(requested, catalog_facts(hw.gpu), sharded=_fsdp_hooks(recipe, hw))


def compiled_decode_host_seconds(recipe: Recipe, hw: Hardware) -> float:
    """Launch floor of one HF decode step compiled for the static cache: the layers replay as a CUDA graph of
    inductor's fused kernels (as many per layer as vLLM's graphed decode, ``VLLM_OPS_PER_LAYER``, at the graphed
    per-kernel cost), while sampling and the stopping criteria stay eager (``HF_OPS_PER_TOKEN``). On the 0.5B
    (24 layers) that is 3.84 ms per step; the H200 measured 3.68 ms (0.943 s for 256 steps of 64 rows,
    benchmarks/RESULTS.md), against 16-29 ms eager."""
    layers = recipe.model.num_layers or 1
    return layers * physics.VLLM_OPS_PER_LAYER * physics.OP_SECONDS_GRAPHED + physics.HF_OPS_PER_TOKEN * hw.op_seconds


def _decode_step(recipe: Recipe, hw: Hardware, batch: float, context: float, engine: str, tp: int = 1,
                 compiled: bool = False) -> float:
    """One decode step of ``batch`` sequences on one engine of ``tp`` GPUs (weights and KV split over them);
    ``compiled``: HF generate's decode step compiled for the static cache (:func:`compiled_decode_host_seconds`)."""
    model = recipe.model
    weights = physics.params_of(model) * physics.half_bytes(hw.precision)
    kv = batch * context * physics.kv_bytes_per_token(model, hw.precision)
    memory = (weights + kv) / (tp * hw.bandwidth * physics.DECODE_BANDWIDTH_EFFICIENCY)
    compute = batch * physics.forward_flops_per_token(model, context) / (tp * hw.peak * efficiency(recipe))
    if engine in ENGINES:  # vLLM and SGLang both replay CUDA graphs of the decode step
        algo = recipe.algorithm
        eager = isinstance(algo, GRPOAlgorithm) and algo.vllm_enforce_eager  # no CUDA graphs: eager launches
        # SGLang replays a captured graph only up to cuda_graph_max_bs; a larger decode batch runs eagerly
        eager = eager or (engine == "sglang" and batch > sglang_fit.graph_and_chunk(hw)[0])
        host = (model.num_layers or 1) * physics.VLLM_OPS_PER_LAYER * (
            hw.op_seconds if eager else physics.OP_SECONDS_GRAPHED)
    elif compiled and not hw.gpu.is_cpu:
        host = compiled_decode_host_seconds(recipe, hw)
    else:
        host = hf_decode_host_seconds(recipe, hw)
    # two all-reduces per layer (attention and MLP outputs), on the stream between the layers' kernels: they add
    # to the GPU's time, they do not hide behind it
    reduce = 2 * (model.num_layers or 1) * tp_allreduce_seconds(hw, tp) if engine in ENGINES else 0.0
    if hw.gpu.is_cpu:  # no asynchronous launch on CPU: dispatch adds to the work
        return memory + compute + host + reduce
    return max(max(memory, compute) + reduce, host)


def _rollout(recipe: Recipe, hw: Hardware, s: RLShape, out: StepModel) -> None:
    model = recipe.model
    mfu = efficiency(recipe)
    algo = recipe.algorithm
    assert isinstance(algo, GRPOAlgorithm)
    servers = rollout_gpus(recipe, hw.world) if s.engine in ENGINES else 0
    tp = algo.vllm_tensor_parallel_size if s.engine in ENGINES else 1
    # sequences one engine generates: server mode spreads the whole step over the rollout GPUs
    gen = s.prompts * s.generations / servers * tp if servers else s.seqs * tp
    prefill_flops = gen * physics.sequence_forward_flops(model, s.prompt_pad)
    decode_flops = gen * s.completion * physics.forward_flops_per_token(model, s.prompt_pad + s.completion / 2)
    out.flops += (prefill_flops + decode_flops) * (servers or hw.world) / tp
    prefill = prefill_flops / (hw.peak * mfu * tp)
    if s.engine == "hf":
        steps = s.completion_max if s.seqs > 1 else s.completion
        static = s.cache == "static" and not hw.gpu.is_cpu
        # the static cache is read whole by every step (its keys beyond the sequence are masked, not skipped)
        context = s.cache_tokens if s.cache == "static" else s.prompt_pad + steps / 2
        decode = steps * _decode_step(recipe, hw, s.seqs, context, "hf", compiled=static)
        hooks = " and FSDP2's hooks on every wrapped module" if _fsdp_hooks(recipe, hw) else ""
        if static:
            floor = (f"{compiled_decode_host_seconds(recipe, hw) * 1e3:.3g} ms (decode step compiled for the static "
                     f"KV cache of {s.cache_tokens:.0f} tokens and replayed as a CUDA graph; sampling eager)")
        else:
            floor = (f"{hf_decode_host_seconds(recipe, hw) * 1e3:.3g} ms of host time ({physics.HF_OPS_PER_LAYER} "
                     f"eager operators per layer + {physics.HF_OPS_PER_TOKEN} per step{hooks}; {s.cache} KV cache)")
        out.assumptions.append(
            f"rollout: HF generate, {s.seqs} sequences per rank in one batch, {steps:.0f} decode steps "
            f"(the batch runs until its longest completion ends); each step at least {floor}")
    else:
        waves, share, installed, cap, cap_knob, held = _engine_waves(recipe, hw, s, gen, servers)
        batch = gen / waves
        body = s.completion * _decode_step(recipe, hw, batch, s.prompt_tokens + s.completion / 2, s.engine, tp)
        tail = (s.completion_max - s.completion) * _decode_step(
            recipe, hw, max(1.0, batch * 0.1), s.prompt_tokens + s.completion_max, s.engine, tp)
        decode = waves * (body + tail)
        depth = algo.off_policy_steps if servers else 0
        if depth > 1:  # generation runs on, up to `depth` batches at once: a step's tokens at the steady rate
            steady = min(gen * depth, held)
            decode = gen * s.completion / steady * _decode_step(
                recipe, hw, steady, s.prompt_tokens + s.completion / 2, s.engine, tp)
            out.assumptions.append(
                f"rollout: {depth} steps in flight: ~{steady:.0f} sequences decode at once per engine (its KV "
                f"cache or cap permitting); no tail per step (it overlaps the next batches)")
        name = "SGLang" if s.engine == "sglang" else "vLLM"
        where = (f"a {name} server on {servers} dedicated GPU(s) (share {share:g})" if servers else
                 f"colocated {name} (share {share:g} of {hw.gpu.memory_gib:g} GiB)")
        out.assumptions.append(
            f"rollout: {where}, tensor parallel {tp}; {installed}; "
            f"{gen:.0f} sequences per engine in {waves} wave(s) of "
            + (f"at most {cap} running sequences ({cap_knob})" if cap else "its KV cache")
            + "; continuous batching, the "
            "longest 10% set the tail" + ("; no CUDA graphs (algorithm.vllm_enforce_eager): each decode step "
                                          "pays eager kernel launches" if algo.vllm_enforce_eager else ""))
        if algo.vllm_sleep_mode and not servers:
            slept = sleep_wake_seconds(hw, share)
            out.phases["sync"] = out.phases.get("sync", 0.0) + slept
            out.assumptions.append(
                f"{name} sleeps while the policy trains and wakes before the rollout: its share "
                f"({share * hw.gpu.memory_gib:.0f} GiB) unmapped and mapped again, ~{slept:.2g} s at "
                f"{CUMEM_RELEASE_BYTES_PER_S / 2**30:.0f} GiB/s (vLLM's logged sleep)")
    out.phases["rollout"] = prefill + decode
    out.compute_seconds += prefill


def sleep_wake_seconds(hw: Hardware, share: float) -> float:
    """One sleep and one wake-up of a colocated engine per step: its whole memory share released and mapped
    again (:data:`CUMEM_RELEASE_BYTES_PER_S`). The weights a level-1 sleep also copies to the host and back are
    not priced here (verl and NeMo RL reload them from the policy in the sync that follows)."""
    return 2 * share * hw.gpu.memory_gib * 2**30 / CUMEM_RELEASE_BYTES_PER_S


def _engine_waves(recipe: Recipe, hw: Hardware, s: RLShape, gen: float,
                  servers: int) -> tuple[int, float, str, int, str, float]:
    """(waves, the engine's share, what is assumed installed, the running-sequence cap that set the waves or 0,
    that cap's knob, the sequences the engine runs at once) for vLLM or SGLang; refuses a share that holds no
    sequence and a rollout whose waves explode.

    Waves come from the KV cache, or from the engine's cap on sequences decoded at once where that binds
    first: ``algorithm.vllm_max_num_seqs`` (vLLM's ``max_num_seqs``, SGLang's ``max_running_requests``) and,
    for SGLang, its req_to_token pool's rows (``sglang_fit.max_requests``)."""
    algo = recipe.algorithm
    assert isinstance(algo, GRPOAlgorithm)
    caps: list[tuple[int, str]] = []
    if algo.vllm_max_num_seqs:
        caps.append((algo.vllm_max_num_seqs, "algorithm.vllm_max_num_seqs"))
    if s.engine == "sglang":
        share = s.share or sglang_fit.default_share(hw, sglang_fit.tp_size(recipe))
        if not hw.gpu.is_cpu:
            sglang_fit.check_share(recipe, hw, share)
        cache = max(1.0, sglang_fit.kv_pool_bytes(recipe, hw, share) * sglang_fit.tp_size(recipe))
        kv_tok = sglang_fit.kv_cell_bytes(recipe, hw) * sglang_fit.tp_size(recipe)
        caps.append((sglang_fit.max_requests(recipe, hw, share), "SGLang's request pool"))
        knob, name = "memory.sglang_mem_fraction_static", "SGLang"
        installed = "SGLang's engine (plan-only: the trainers do not run it)"
    else:
        share = (s.share or 0.9) if servers else (s.share or 0.0)
        if not hw.gpu.is_cpu:
            check_share(recipe, hw, share)
        cache = max(1.0, kv_cache_bytes(recipe, hw, share))
        kv_tok = physics.kv_bytes_per_token(recipe.model, hw.precision)
        knob, name = "memory.vllm_gpu_memory_utilization", "vLLM"
        installed = "assumes vLLM is installed on the node, else HF generate"
    waves = max(1, math.ceil(gen * (s.prompt_tokens + s.completion) * kv_tok / cache))
    held = cache / ((s.prompt_tokens + s.completion) * kv_tok)
    cap, cap_knob = min(caps) if caps else (0, "")
    held = min(held, cap) if cap else held
    cap_waves = math.ceil(gen / cap) if cap else 0
    if cap_waves <= waves:
        cap, cap_knob = 0, ""
    waves = max(waves, cap_waves)
    if waves > MAX_WAVES:
        raise PlanError(
            f"the rollout would run in {waves} waves of {name}'s KV cache ({cache / physics.GIB:.1f} GiB for "
            f"{gen:.0f} sequences per engine): raise {knob}, lower algorithm.train_batch_size, or add GPUs (at "
            f"most {MAX_WAVES} waves are planned)")
    return waves, share, installed, cap, cap_knob, max(1.0, held)


def _sync(recipe: Recipe, hw: Hardware, s: RLShape, out: StepModel) -> None:
    if s.engine not in ENGINES:
        return
    params = physics.params_of(recipe.model)
    weights = params * physics.half_bytes(hw.precision)
    link = hw.gpu.interconnect_gbs * 1e9 or LOOPBACK_BYTES_PER_S
    gather = weights * (hw.world - 1) / hw.world / link if layout(recipe, hw.world).sharded else 0.0
    if rollout_gpus(recipe, hw.world):  # to a server on other GPUs: one broadcast over the link
        gather += weights / link
    tensors = 12 * (recipe.model.num_layers or 1)
    out.phases["sync"] = out.phases.get("sync", 0.0) + gather + weights / hw.bandwidth + tensors * SYNC_TENSOR_SECONDS


def old_logprob_pass(algo: GRPOAlgorithm, s: RLShape) -> bool:
    """Whether a step runs the old-policy log-prob pass: this trainer (and TRL) only when a rollout feeds more
    than one update, verl's every step (its ray trainer recomputes ``old_log_prob`` before the updates whatever
    the mini-batches), AReaL and verl's fully async trainer never (the rollout engine's log-probs stand in)."""
    if algo.old_logprob_pass == "auto":
        return s.updates > 1 or algo.num_iterations > 1
    return algo.old_logprob_pass == "always"


def _forward_pass(recipe: Recipe, hw: Hardware, s: RLShape) -> tuple[float, float]:
    """(seconds, FLOPs per rank) of one no-grad forward over the step's sequences."""
    flops = s.seqs * physics.sequence_forward_flops(recipe.model, s.train_tokens)
    chunks = math.ceil(s.seqs / s.micro)
    host = chunks * (recipe.model.num_layers or 1) * 25 * hw.op_seconds
    return flops / (hw.peak * train_efficiency(recipe, hw)) + host, flops


def _update(recipe: Recipe, hw: Hardware, s: RLShape, algo: GRPOAlgorithm, out: StepModel) -> None:
    model = recipe.model
    params = physics.params_of(model)
    lay = layout(recipe, hw.world)
    ckpt = 4 / 3 if recipe.train.gradient_checkpointing else 1.0
    passes = 2 if model.lora_rank else 3  # LoRA: no weight gradients of the frozen model
    flops = algo.num_iterations * passes * ckpt * s.seqs * physics.sequence_forward_flops(model, s.train_tokens)
    out.flops += flops * lay.train_world
    updates = algo.num_iterations * s.updates
    micro_steps = updates * s.micro_per_update
    host = micro_steps * (model.num_layers or 1) * 25 * 3 * hw.op_seconds
    trainable = lay.trainable / lay.model_parallel
    optimizer = updates * 28 * trainable / lay.optimizer_shard / (
        HOST_OPTIMIZER_BYTES_PER_S if lay.offload else hw.bandwidth)
    link = hw.gpu.interconnect_gbs * 1e9 or LOOPBACK_BYTES_PER_S
    ring = (lay.dp - 1) / lay.dp if lay.dp > 1 else 0.0
    half = physics.half_bytes(hw.precision)
    if lay.sharded:  # all-gather half weights forward and backward per micro-batch, reduce-scatter grads
        grads = (micro_steps if not lay.full_grads_while_accumulating else updates) * grad_bytes(recipe, hw) * trainable
        comm = ring * (micro_steps * 2 * params / lay.model_parallel * half + grads) / link
    else:
        comm = updates * 2 * ring * grad_bytes(recipe, hw) * trainable / link
    out.phases["update"] = flops / (hw.peak * train_efficiency(recipe, hw)) + host + optimizer + comm
    out.compute_seconds += flops / (hw.peak * train_efficiency(recipe, hw))


def flex_compile_seconds(recipe: Recipe, hw: Hardware) -> float:
    """The packed passes' FlexAttention compile, or 0: only where ``algorithm.sequence_packing`` is on and
    the kernel resolver (``contract.kernels.flex_blocker``) finds flex on the plan's GPU; the CPU and padded
    runs compile nothing (the CPU packer is eager, ``train.grpo.packed_pass``)."""
    algo = recipe.algorithm
    if not (isinstance(algo, GRPOAlgorithm) and algo.sequence_packing):
        return 0.0
    if flex_blocker(catalog_facts(hw.gpu)) is not None:
        return 0.0
    return FLEX_COMPILE_SECONDS + FLEX_RECOMPILE_SECONDS


def _run_overhead(recipe: Recipe, hw: Hardware, algo: GRPOAlgorithm, s: RLShape, out: StepModel) -> None:
    """Start-up, rank-0 evaluations and full checkpoints over the run (see module docstring)."""
    steps = recipe.train.max_steps or 0
    every = recipe.train.eval_every
    evals = (len(range(every, steps, every)) if every else 0) + 1 if algo.eval_samples and steps else 0
    new = algo.eval_max_new_tokens or algo.max_completion_length
    batch = algo.eval_samples
    prefill = batch * physics.sequence_forward_flops(recipe.model, s.prompt_pad) / (hw.peak * efficiency(recipe))
    decode = new * _decode_step(recipe, hw, batch, s.prompt_pad + new / 2, "hf")
    score = batch * (SANDBOX_PROGRAM_SECONDS / max(1, algo.sandbox_workers or recipe.resources.cpus_per_gpu)
                     if entrypoint_of(recipe.entrypoint).code_reward else CHECK_SECONDS)
    per_eval = prefill + decode + score
    saves = (steps // recipe.train.save_every + 1) if recipe.train.save_every and steps else 0
    per_save = 12 * physics.params_of(recipe.model) / CHECKPOINT_BYTES_PER_S
    compile_s = flex_compile_seconds(recipe, hw)
    decode_compile = GENERATE_COMPILE_SECONDS if s.cache == "static" and not hw.gpu.is_cpu else 0.0
    out.overhead_seconds = startup_seconds(hw) + compile_s + decode_compile + evals * per_eval + saves * per_save
    out.assumptions.append(
        f"run overhead: start-up {startup_seconds(hw):g} s"
        + (f" + ~{compile_s:g} s of FlexAttention compile for the packed passes (first compile + one recompile, "
           "H100 2026-11-27)" if compile_s else "")
        + (f" + ~{decode_compile:g} s compiling HF generate's decode step for the static KV cache (H200 "
           "2026-11-27)" if decode_compile else "") + f"; {evals} evaluation(s) on rank 0 ({batch} greedy "
        f"completions of up to {new} tokens with HF generate, ~{per_eval:.3g} s each); {saves} full checkpoint(s) "
        f"(12 B/param at {CHECKPOINT_BYTES_PER_S / 1e9:g} GB/s, ~{per_save:.3g} s each)")


def rl(recipe: Recipe, hw: Hardware) -> StepModel:
    algo = recipe.algorithm
    assert isinstance(algo, GRPOAlgorithm)
    s = rl_shape(recipe, hw)
    out = StepModel("rl")
    out.assumptions.append(
        f"RL step: {s.prompts} prompts × {s.generations} completions ({s.seqs} per rank); prompts "
        f"~{s.prompt_tokens:.0f} tokens (estimate.prompt_fraction), completions ~{s.completion:.0f} of "
        f"{s.completion_max} (estimate.completion_fraction); log-prob and update passes on "
        + (f"packed sequences of ~{s.real_tokens:.0f} real tokens (algorithm.sequence_packing)"
           + (f", ~{s.train_tokens:.0f} each with FlexAttention's bins of {s.bin_width}" if s.bin_width else "")
           if s.packed
           else f"tensors padded to {s.padded:.0f} (the trainer pads; algorithm.sequence_packing=true packs)"))
    _sync(recipe, hw, s, out)
    _rollout(recipe, hw, s, out)
    passes = []
    if old_logprob_pass(algo, s):
        passes.append("old policy")
    if algo.beta > 0:
        passes.append("reference")
    for _ in passes:
        seconds, flops = _forward_pass(recipe, hw, s)
        out.phases["logprob"] = out.phases.get("logprob", 0.0) + seconds
        out.compute_seconds += flops / (hw.peak * train_efficiency(recipe, hw))
        out.flops += flops * hw.world
    _update(recipe, hw, s, algo, out)
    if entrypoint_of(recipe.entrypoint).code_reward:
        workers = algo.sandbox_workers or recipe.resources.cpus_per_gpu
        out.phases["reward"] = math.ceil(s.seqs / workers) * SANDBOX_PROGRAM_SECONDS
        out.assumptions.append(f"reward: {s.seqs} sandboxed programs per rank, {workers} at a time, "
                               f"~{SANDBOX_PROGRAM_SECONDS:g} s each")
    else:
        out.phases["reward"] = s.seqs * CHECK_SECONDS
    out.assumptions.append(
        f"log-prob passes: {', '.join(passes) or 'none'}; {algo.num_iterations} × {s.updates} update(s) of "
        f"{s.micro_per_update} micro-batch(es) of {s.micro}; {layout(recipe, hw.world).label}; compute at "
        f"{efficiency(recipe):.0%} MFU "
        + ("(estimate.mfu: assumed by the recipe)" if "mfu" in recipe.estimate.model_fields_set else
           f"(the planner's default, range {RL_EFFICIENCY_RANGE[0]:.0%}-{RL_EFFICIENCY_RANGE[1]:.0%})"))
    if moe_note(recipe, hw.gpu) and "mfu" not in recipe.estimate.model_fields_set:
        out.assumptions.append(moe_note(recipe, hw.gpu))
    if algo.off_policy_steps:
        out.concurrent = ("rollout",)
        out.assumptions.append(
            "one-step off-policy: step n+1's rollout runs while step n trains; the step is the longer of the two "
            "plus the weight sync" if algo.off_policy_steps == 1 else
            f"{algo.off_policy_steps}-step off-policy: generation runs on, up to {algo.off_policy_steps} steps "
            "ahead; the step is the longer of the rollout (at the engines' steady throughput) and the training, "
            "plus the weight sync")
    _run_overhead(recipe, hw, algo, s, out)
    return out
