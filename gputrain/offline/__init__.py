"""Clusters whose compute nodes have no internet (SuperCloud): prepare on the login node, check, sync after.

- :mod:`~gputrain.offline.needs`: which hub repositories a plan loads (model, datasets), from the plan alone.
- :mod:`~gputrain.offline.prepare`: download them pinned to one commit into the profile's cache, verified
  (sizes, sha256 / git blob ids), recorded in the cache's manifest; idempotent and resumable.
- :mod:`~gputrain.offline.manifest`: that record, and the pre-submit check that reads it without network.
- :mod:`~gputrain.offline.interpreter`: can the job's interpreter import gputrain and the training extras?
- :mod:`~gputrain.offline.sync`: upload a finished job's offline W&B runs and list its TensorBoard files.

Nothing here imports a hub or training library at module level (``gputrain --help`` stays cheap).
"""
