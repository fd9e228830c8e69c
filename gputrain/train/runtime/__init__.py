"""Shared training runtime: one set-up call gives an entrypoint its ranks, device, precision,
checkpoints, metrics and preemption handling.

Every bundled training is launched as::

    torchrun --nproc_per_node 2 -m gputrain.train.<module> --plan JOB/plan.json --job-dir JOB

and starts with ``ctx = setup_run()``. ``plan.json`` is read through the typed plan contract
(:class:`gputrain.contract.plan.JobPlan`): settings are attributes, and their defaults are the recipe
schema's, never the training's. A skeleton that resumes, logs, and survives preemption::

    from gputrain.recipe.algorithms.gnn_coloring import GNNColoringAlgorithm
    from gputrain.train.runtime import RunContext, run_entrypoint

    def train(ctx: RunContext) -> int:
        train = ctx.recipe.train                                # resolved: effective precision, lr, ...
        algo = ctx.algorithm(GNNColoringAlgorithm)              # this entrypoint's algorithm: settings
        model = ctx.wrap_ddp(build_model(algo).to(ctx.device))  # DDP when world_size > 1
        model = ctx.compile(model)                              # only if train.compile and CUDA+triton
        opt = torch.optim.AdamW(model.parameters(), lr=train.learning_rate)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_factor(train.lr_schedule, train.warmup_steps, total))
        loader, sampler = ctx.make_loader(dataset, train.batch_size)  # DistributedSampler
        pos = {"epoch": 0, "batch": 0}                          # sampler position: a plain dict
        state = {"model": model, "optimizer": opt, "scheduler": sched, "scaler": ctx.scaler, "pos": pos}
        step = 0
        if (ckpt := ctx.checkpoints.restore(state)) is not None:  # in place: weights, optim, RNG...
            step, pos = ckpt.step, ckpt.state["pos"]             # ...plain values come back here
        for epoch in range(pos["epoch"], epochs):
            sampler.set_epoch(epoch)
            skip = pos["batch"] if epoch == pos["epoch"] else 0
            for i, batch in enumerate(islice(loader, skip, None), start=skip):
                with ctx.autocast():                            # bf16 / fp16 autocast, nothing on fp32
                    loss = model(batch)
                grad_norm = ctx.optimizer_step(loss, opt, model.parameters())  # scaler + train.grad_clip
                step += 1
                ctx.metrics.log(step, loss=loss.item(), grad_norm=grad_norm)  # rank 0 only
                state["pos"] = {"epoch": epoch, "batch": i + 1}
                if ctx.should_stop():                           # collective: call on every rank
                    ctx.exit_for_requeue(step, state)           # checkpoint, PREEMPTED, exit 75
                if train.save_every and step % train.save_every == 0:
                    ctx.checkpoints.save(step, state)           # collective: call on every rank
        ctx.write_json("result.json", {...})                    # rank 0 writes atomically
        return 0

    if __name__ == "__main__":
        run_entrypoint(train)                                   # setup_run + train + close + exit code

``RunContext`` fields: ``rank, world_size, local_rank, device, is_main, plan`` (the :class:`JobPlan`),
``recipe`` (``plan.recipe``, the resolved recipe), ``algorithm(kind)`` (the typed ``algorithm:`` settings,
checked to be ``kind``), ``job_dir, seed, args`` (argv left after ``--plan/--job-dir``), ``precision``
(``.name`` bf16|fp16|fp32, ``.dtype``), ``checkpoints`` (:class:`CheckpointManager`), ``metrics``
(:class:`Metrics`, ``.log(step, **numbers)``, writes ``metrics.jsonl`` through
``gputrain.logs.schema.MetricsWriter`` plus W&B/TensorBoard per ``tracking:``), ``preemption``.
Helpers: ``make_loader`` (DistributedSampler + a private generator: a loader
without one draws from the global RNG on every ``iter()``, which breaks bit-exact resume),
``make_eval_loader`` (this rank's share of an evaluation set, unpadded: sum, count, all-reduce), ``print0``,
``autocast()``, ``scaler`` (a disabled GradScaler unless fp16), ``optimizer_step``, ``wrap_ddp``,
``compile``, ``seed_per_rank``, ``should_stop()``, ``exit_for_requeue(step, state)``,
``all_reduce_mean(**values)``, ``barrier()``, ``write_json``, ``close()`` (barrier before
destroy_process_group: without it gloo runs sometimes abort at exit).

Rules the runtime relies on: ``checkpoints.save``, ``should_stop``, ``exit_for_requeue``,
``all_reduce_mean`` and ``barrier`` are collectives (every rank calls them at the same point).
Checkpoints hold the ``state_dict()`` of objects that have one (DDP/compiled models are unwrapped) and
plain values as they are; per-rank RNG states (CPU, CUDA, Python, NumPy) always, and an optional
``rank_state=`` per rank (FSDP shards). Precision comes from ``plan.precision`` (the planner's effective
value); CPU always runs fp32. Seeds: ``train.seed`` on every rank (identical init); call
``ctx.seed_per_rank()`` after building the model for per-rank streams.
"""

from gputrain.contract.plan import JobPlan, load_job_plan
from gputrain.train.runtime.checkpoint import Checkpoint, CheckpointManager
from gputrain.train.runtime.context import RunContext, required, run_entrypoint, setup_run
from gputrain.train.runtime.metrics import Metrics
from gputrain.train.runtime.signals import PREEMPTED_FILE, REQUEUE_EXIT_CODE

__all__ = [
    "PREEMPTED_FILE",
    "REQUEUE_EXIT_CODE",
    "Checkpoint",
    "CheckpointManager",
    "JobPlan",
    "Metrics",
    "RunContext",
    "load_job_plan",
    "required",
    "run_entrypoint",
    "setup_run",
]
