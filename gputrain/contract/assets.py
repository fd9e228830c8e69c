"""What a job loads from the Hugging Face hub, pinned: repositories, commits, files with sizes and hashes.

``gputrain prepare`` resolves each repository a plan needs to one commit on a machine with internet and
records it here; ``gputrain submit`` on an offline cluster copies the record into the plan
(``JobPlan.offline``), so ``plan.json`` says exactly which commit of which file the job reads, and the
training passes that commit as ``revision=`` (with ``HF_HUB_OFFLINE=1`` nothing else could be fetched).
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

RepoKind = Literal["model", "dataset"]
_COMMIT_RE = re.compile(r"\A[0-9a-f]{40}\Z")
#: A hub repository id: ``name`` or ``owner/name`` (letters, digits, ``-_.``), never a path.
REPO_ID_RE = re.compile(r"\A(?:[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/)?[A-Za-z0-9][A-Za-z0-9_.-]{0,95}\Z")


class HubItem(BaseModel):
    """One repository a plan loads (what, not which commit): the model, or a dataset (config, splits)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: RepoKind
    repo: str
    config: str | None = Field(default=None, description="dataset configuration (subset), if any")
    splits: tuple[str, ...] = Field(default=(), description="dataset splits the training reads")
    revision: str = Field(default="main", description="branch, tag or commit asked for")
    files: Literal["all", "tokenizer"] = Field(
        default="all", description="of a model: every file the training loads, or only its tokenizer and config")

    @field_validator("repo")
    @classmethod
    def _repo_id(cls, value: str) -> str:
        if not REPO_ID_RE.match(value) or ".." in value:
            raise ValueError(f"{value!r} is not a hub repository id (owner/name)")
        return value

    @property
    def label(self) -> str:
        """How messages name it: ``model Qwen/X`` or ``dataset org/mbpp (config main)``."""
        extra = f" (config {self.config})" if self.config else ""
        what = "tokenizer" if self.files == "tokenizer" else self.kind
        return f"{what} {self.repo}{extra}"


class PinnedFile(BaseModel):
    """A file of a pinned commit with what verifies it: size, and sha256 (LFS files) or the git blob id."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str
    size: int = Field(ge=0)
    sha256: str | None = None
    blob_id: str | None = None


class PinnedRepo(BaseModel):
    """A :class:`HubItem` resolved to one commit and the files of it the training reads."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    item: HubItem
    commit: str
    files: tuple[PinnedFile, ...] = ()
    cache_files: tuple[str, ...] = Field(default=(), description="datasets' Arrow files built from the files "
                                         "(relative to the cache folder): what an offline load_dataset reads")

    @field_validator("commit")
    @classmethod
    def _commit(cls, value: str) -> str:
        if not _COMMIT_RE.match(value):
            raise ValueError(f"{value!r} is not a 40-hex commit id")
        return value

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)


class OfflineAssets(BaseModel):
    """The prepared cache a job on a node without internet reads (``HF_HOME``) and the commits it pins."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cache_dir: str = Field(description="HF_HOME on the shared filesystem, filled by gputrain prepare")
    repos: tuple[PinnedRepo, ...] = ()

    def commit_of(self, kind: RepoKind, repo: str) -> str | None:
        """The pinned commit of ``repo`` (None: not pinned, e.g. a local path or a generated source)."""
        for pinned in self.repos:
            if pinned.item.kind == kind and pinned.item.repo == repo:
                return pinned.commit
        return None
