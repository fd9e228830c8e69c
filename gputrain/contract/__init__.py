"""The contracts between gputrain's stages, defined once (stdlib + pydantic only; a leaf package).

- :mod:`gputrain.contract.plan`: :class:`~gputrain.contract.plan.JobPlan`, the typed, versioned resolved
  plan that the planner builds, the renderers and backends read, ``plan.json`` serializes and every
  training reads back (``ctx.plan``).
- :mod:`gputrain.contract.jobstate`: exit codes, marker files and end states of a job folder, and the one
  function from (exit code, markers, backend facts) to an end state.
- :mod:`gputrain.contract.hardware`, :mod:`~gputrain.contract.cluster`, :mod:`~gputrain.contract.estimate`:
  the parts of a plan (GPU facts, Slurm cluster profile, estimate).

This ``__init__`` imports nothing: :mod:`~gputrain.contract.jobstate` is read by job scripts and the
registry, which must not pay for pydantic.
"""
