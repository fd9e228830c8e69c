"""The training island (``python -m gputrain.train.<entrypoint>``); see :mod:`gputrain.train.runtime`."""

import os as _os

if _os.environ.get("GPUTRAIN_JOB_DIR") or _os.environ.get("TORCHELASTIC_RUN_ID"):
    # A launched worker: a preemption signal during the seconds torch takes to import is kept, not fatal.
    from gputrain.train.runtime.signals import defer_early_signals as _defer

    _defer()
