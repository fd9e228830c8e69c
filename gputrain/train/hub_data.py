"""Build the ``datasets`` cache of one hub dataset at one commit, so a node without internet can load it.

``datasets.load_dataset`` offline reads the Arrow files it built on an earlier online load (the hub's raw
files alone are not enough), so ``gputrain prepare`` runs this module on the login node, with ``HF_HOME``
set to the cluster's cache, the same call the training makes::

    python -m gputrain.train.hub_data --repo google-research-datasets/mbpp --revision <commit> [--config C]

It prints one JSON line: the splits built and their Arrow files relative to ``HF_HOME``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys


def build(repo: str, revision: str, config: str | None) -> dict[str, object]:
    import datasets

    built = datasets.load_dataset(repo, config, revision=revision)
    home = os.path.realpath(os.environ.get("HF_HOME") or os.path.expanduser("~/.cache/huggingface"))
    files = sorted({os.path.relpath(os.path.realpath(f["filename"]), home)
                    for split in built.values() for f in split.cache_files})
    return {"splits": sorted(built), "cache_files": files, "rows": {k: len(v) for k, v in built.items()}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gputrain.train.hub_data")
    parser.add_argument("--repo", required=True)
    parser.add_argument("--revision", required=True)
    parser.add_argument("--config")
    args = parser.parse_args(argv)
    try:
        result = build(args.repo, args.revision, args.config)
    except Exception as exc:  # the hub client raises many types; the caller shows one line
        print(json.dumps({"error": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"}))
        return 1
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
