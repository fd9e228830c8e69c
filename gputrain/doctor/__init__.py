"""The failure doctor: from a failed job's root cause and its plan to what to change, and the command to rerun.

``gputrain logs JOB`` names the cause (``gputrain.logs.causes.root_cause``); this package turns it into a
remedy computed from the job's own plan and measurements: the largest per-GPU batch the planner's memory
model fits under the capacity the OOM message reported (scaled by how far the model was off on the failed
run), the ``--time`` the measured step rate needs for the steps left, the rank and host of an NCCL timeout
and the environment that makes a rerun say more, how many times a preempted job has resumed.
``gputrain logs JOB --fix`` prints it with a ``gputrain run``/``submit`` command that applies the overrides and
resumes from the job's newest checkpoint (``--resume-from JOB``).

It sits above the planner and the log summaries (it needs both) and below the CLI.
"""

from gputrain.doctor.command import rerun_command
from gputrain.doctor.remedy import Remedy, prescribe

__all__ = ["Remedy", "prescribe", "rerun_command"]
