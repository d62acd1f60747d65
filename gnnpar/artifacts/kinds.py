"""Every kind of artifact gnnpar writes, its marker, and what the marker says it owns.

A directory artifact holds one marker file, a JSON document of gnnpar's that lists every
other file it put there; a file artifact carries its marker itself or beside it.  This is
the one table of them (the conformance suite runs every command against each kind it
writes or reads):

==============  ===============  ==========================================================
kind            marker           owns
==============  ===============  ==========================================================
partition       ``meta.json``    the part files its ``files`` lists
dataset         ``dataset.json`` the arrays its ``files`` (older: ``arrays``) lists
run             ``record.json``  what its ``files`` lists (older: :data:`RUN_FILES`), the
                                 run ``--overwrite`` put aside, and the parts below
checkpoint      ``state.json``   ``tensors.bin``
predictions     ``index.json``   every shard file its ``shards`` list
tensorboard     (none)           TensorBoard's event files
export          ``NAME.json``    ``NAME.pt`` and ``NAME-decoder.pt`` as its ``files`` lists
picture         in the file      itself (PNG text, SVG and PDF metadata)
==============  ===============  ==========================================================

A kind also owns the temporary names of its own atomic writes (``.NAME.tmp-*``,
``.NAME.old-*``) while they exist, so a killed writer's leftovers are gnnpar's to clean.
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gnnpar.artifacts.documents import read_document, read_json
from gnnpar.errors import GnnparError

RECORD_FILE = "record.json"
CONFIG_FILE = "config.json"
CHECKPOINT_DIR = "checkpoint"
BEST_DIR = "best"
"""The best-valid model's checkpoint (``--save-best``), beside the newest one."""
STATE_FILE = "state.json"
TENSORS_FILE = "tensors.bin"
METRICS_CSV = "metrics.csv"
TENSORBOARD_DIR = "tensorboard"
PREDICTIONS_DIR = "predictions"
INDEX_FILE = "index.json"
PREVIOUS_RUN = ".previous-run"
"""Where ``--overwrite`` keeps the replaced run until the new one's first checkpoint."""
RUN_FILES = (RECORD_FILE, CONFIG_FILE, CHECKPOINT_DIR, BEST_DIR, METRICS_CSV,
             TENSORBOARD_DIR, PREDICTIONS_DIR)
"""What a run may write into its directory (a version-2 record lists nothing: these)."""
TEMPORARY = re.compile(r"^\.(?P<base>.+)\.(tmp|old)(-[^/]*)?$")
"""The temporary names of gnnpar's atomic writes: ``.NAME.tmp-*`` and ``.NAME.old-*``."""


@dataclass(frozen=True)
class DocumentFormat:
    """A JSON document gnnpar writes: its ``format``, the versions read, the digest.

    Attributes:
        format: The document's ``format`` field (``"gnnpar-run"``).
        versions: The ``format_version`` values this gnnpar reads.
        what: The document in messages (``"a run record"``).
        digest_from: The first version that carries its own digest (``None``: all).
    """

    format: str
    versions: tuple[int, ...]
    what: str
    digest_from: int | None = None

    @property
    def version(self) -> int:
        """The version written."""
        return self.versions[-1]

    def read(self, path: str | os.PathLike[str], error: type[GnnparError],
             fix: str) -> dict[str, Any]:
        """The document at ``path``, checked (format, version, digest), else ``error``."""
        return read_document(path, self.format, self.versions, error, self.what, fix,
                             self.digest_from)

    def recognize(self, doc: Any) -> bool:
        """Whether a parsed document claims this format."""
        return isinstance(doc, dict) and doc.get("format") == self.format


RUN_RECORD = DocumentFormat("gnnpar-run", (2, 3, 4), "a run record", digest_from=3)
"""``record.json``; version 3 added ``files`` (what the run wrote) and its digest, version 4
renamed ``partition.feat_dtype`` to ``partition.feature_dtype``."""
CHECKPOINT_STATE = DocumentFormat("gnnpar-checkpoint", (2,), "a checkpoint's state.json")
PREDICTIONS_INDEX = DocumentFormat("gnnpar-predictions", (2,), "a predictions index")
"""``index.json``; version 2 added each shard file's size and digest and the binding."""
EXPORT_SPEC = DocumentFormat("gnnpar-export", (1,), "an exported model's description")


@dataclass(frozen=True)
class ArtifactKind:
    """A kind of directory gnnpar writes, and how to tell what in one it wrote.

    Attributes:
        key: Its name in the registry (``"partition"``).
        name: Its name in messages (``"a partition directory"``).
        marker: The marker file every directory of this kind holds (``None``: the kind
            owns exactly the files matching ``patterns``).
        recognize: The parsed marker -> whether it is this kind's.
        listing: The parsed marker -> the relative paths of every other file it owns;
            may raise ``KeyError``, ``TypeError`` or ``ValueError`` on a damaged marker.
        parts: Subdirectories owned by a kind of their own (a run's checkpoint).
        patterns: File names owned without a listing (``marker`` is ``None``).
    """

    key: str
    name: str
    marker: str | None
    recognize: Callable[[Any], bool] = lambda doc: True
    listing: Callable[[Any], Iterable[str]] = lambda doc: ()
    parts: Mapping[str, ArtifactKind] = field(default_factory=dict)
    patterns: tuple[str, ...] = ()

    def is_one(self, directory: str | os.PathLike[str]) -> bool:
        """Whether ``directory`` holds this kind's marker (parsed and recognized)."""
        if self.marker is None:
            return False
        path = Path(directory) / self.marker
        if not path.is_file():
            return False
        try:
            return bool(self.recognize(read_json(path, GnnparError)))
        except (GnnparError, AttributeError, KeyError, TypeError, ValueError):
            return False

    def foreign(self, out: Path) -> tuple[Path | None, str]:
        """The first entry of ``out`` that gnnpar did not write as this kind, and why.

        Returns:
            ``(None, "")`` when ``out`` holds only the marker, the files it lists (some
            may be missing: a damaged directory is still replaced), its parts and
            temporaries, else the offending path and a sentence on it.
        """
        if not any(out.iterdir()):
            return None, ""  # holds nothing, so nothing of anyone's
        if self.marker is None:
            for path in sorted(out.rglob("*")):
                if path.is_symlink() or not path.is_file() or not any(
                        fnmatch.fnmatch(path.name, p) for p in self.patterns):
                    return path, (f"was not written by gnnpar as part of {self.name}, so the "
                                  "directory is never replaced.")
            return None, ""
        marker = out / self.marker
        if not marker.is_file() or marker.is_symlink():
            return out, f"is not {self.name} (no {self.marker}), so it is never replaced."
        try:
            doc = read_json(marker, GnnparError)
            if not self.recognize(doc):
                raise ValueError(self.marker)
            listed = {os.path.normpath(str(rel)) for rel in self.listing(doc)}
        except (GnnparError, AttributeError, KeyError, TypeError, ValueError):
            return marker, (f"is not the {self.marker} of {self.name} that lists its files, "
                            "so the directory is never replaced.")
        listed.add(self.marker)
        return self._walk(out, Path(), listed,
                          {str(p) for rel in listed for p in Path(rel).parents})

    def _walk(self, out: Path, rel_dir: Path, listed: set[str], parents: set[str]
              ) -> tuple[Path | None, str]:
        for path in sorted((out / rel_dir).iterdir()):
            rel = str(rel_dir / path.name)
            if not path.is_symlink():
                if rel in self.parts and path.is_dir():
                    bad, why = self.parts[rel].foreign(path)
                    if bad is None:
                        continue
                    return bad, why
                if path.is_dir() and rel in parents:
                    bad, why = self._walk(out, Path(rel), listed, parents)
                    if bad is None:
                        continue
                    return bad, why
                temp = TEMPORARY.match(path.name)
                if (path.is_file() and rel in listed) or (temp is not None and str(
                        rel_dir / temp.group("base")) in listed | set(self.parts)):
                    continue
            return path, (f"was not written by gnnpar as part of {self.name} (its "
                          f"{self.marker} does not list it), so the directory is never "
                          "replaced.")
        return None, ""


def _shard_files(doc: Any) -> Iterable[str]:
    return [f"{s['dir']}/{f}" for s in doc["shards"] for f in s["files"]]


def _run_files(doc: Any) -> Iterable[str]:
    files = doc.get("files")
    return RUN_FILES if files is None else [str(f) for f in files]


PARTITION = ArtifactKind(
    "partition", "a partition directory", "meta.json",
    lambda doc: isinstance(doc, dict) and "offsets" in doc and "files" in doc,
    lambda doc: doc["files"].keys())
DATASET = ArtifactKind(
    "dataset", "a dataset directory", "dataset.json",
    lambda doc: isinstance(doc, dict) and str(doc.get("format", "")).startswith("gnnpar-"),
    lambda doc: (doc["files"].keys() if "files" in doc
                 else [f"{a}.npy" for a in doc["arrays"]]))
CHECKPOINT = ArtifactKind("checkpoint", "a checkpoint", STATE_FILE,
                          CHECKPOINT_STATE.recognize, lambda doc: [TENSORS_FILE])
PREDICTIONS = ArtifactKind("predictions", "a predictions directory", INDEX_FILE,
                           PREDICTIONS_INDEX.recognize, _shard_files)
TENSORBOARD = ArtifactKind("tensorboard", "a TensorBoard directory", None,
                           patterns=("events.out.tfevents.*",))
_RUN_PARTS: dict[str, ArtifactKind] = {CHECKPOINT_DIR: CHECKPOINT, BEST_DIR: CHECKPOINT,
                                       PREDICTIONS_DIR: PREDICTIONS,
                                       TENSORBOARD_DIR: TENSORBOARD}
RUN = ArtifactKind("run", "a run directory", RECORD_FILE, RUN_RECORD.recognize,
                   _run_files, _RUN_PARTS)
_RUN_PARTS[PREVIOUS_RUN] = RUN  # the run --overwrite set aside is a run directory too
DIRECTORY_KINDS = (PARTITION, DATASET, RUN, CHECKPOINT, PREDICTIONS)
"""The kinds with a marker: what an output may not be written into."""


def enclosing(path: str | os.PathLike[str]) -> tuple[ArtifactKind, Path] | None:
    """The nearest gnnpar directory artifact that ``path`` lies inside (not ``path`` itself).

    Returns:
        ``(kind, directory)``, or ``None`` when no ancestor of ``path`` is one.
    """
    p = Path(os.path.abspath(path))
    for parent in p.parents:
        for kind in DIRECTORY_KINDS:
            if kind.is_one(parent):
                return kind, parent
    return None
