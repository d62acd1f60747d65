"""``gnnpar-export``: a trained run's model as a plain PyG module's ``state_dict``.

Usage::

    gnnpar-export RUN_DIR --out model.pt [--overwrite] [--best]

writes ``model.pt`` (``torch.save`` of the PyG model's ``state_dict``: tensors only,
loadable with ``torch.load(weights_only=True)``) and ``model.json`` beside it (the
class in ``torch_geometric.nn.models`` and its constructor arguments), so that a
process without gnnpar rebuilds the model::

    import json, torch, torch_geometric.nn.models as models
    spec = json.load(open("model.json"))
    model = getattr(models, spec["class"])(**spec["kwargs"])
    model.load_state_dict(torch.load("model.pt", weights_only=True))
    model.eval()  # model(x, edge_index): the logits of every node

A link-prediction run exports its encoder (``model(x, edge_index)`` are the node
embeddings); ``model.json``'s ``decoder`` says how a pair scores: ``dot`` (the inner
product) or ``mlp`` (``torch.nn.Sequential`` of ``decoder_layers`` in
``model-decoder.pt``, on the elementwise product).  Typed runs and graphs without
features (learnt input rows) have no plain PyG form and are refused.

``model.json`` is also gnnpar's marker of the export: it lists the size and SHA-256 of
each file written and binds them to the run, checkpoint and partition they come from.
An existing ``--out`` is replaced only with ``--overwrite`` and only when that marker
lists it; anything else -- a user's file, a run's own ``record.json`` -- is refused, and
nothing is written inside a gnnpar directory.  Every file is written aside and renamed,
the marker last.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gnnpar.artifacts.files import (
    atomic_file,
    digested,
    file_entry,
    remove_stale_temporaries,
    write_json_atomic,
)
from gnnpar.artifacts.kinds import EXPORT_SPEC
from gnnpar.artifacts.lock import lock
from gnnpar.artifacts.ownership import check_output_files
from gnnpar.config import ArgumentParser
from gnnpar.errors import ConfigError, GnnparError

PROG = "gnnpar-export"


def export_files(out: str | os.PathLike[str]) -> tuple[Path, Path, Path]:
    """``(state dict, description, decoder)`` paths of an export to ``out``.

    Raises:
        ConfigError: ``out`` ends in ``.json`` (the description's own name).
    """
    target = Path(out)
    if target.suffix.lower() == ".json":
        raise ConfigError("names the description file; --out is the state dict.",
                          path=target, field="--out", fix="pass --out MODEL.pt.")
    return (target, target.with_suffix(".json"),
            target.with_name(f"{target.stem}-decoder.pt"))


def _listed(meta: Path) -> set[str]:
    """The files an export's description lists as its own (empty: not gnnpar's)."""
    try:
        doc = EXPORT_SPEC.read(meta, ConfigError, "")
        files = doc["files"]
        return {str(f) for f in files} | {meta.name} if isinstance(files, dict) else set()
    except (ConfigError, KeyError, TypeError):
        return set()


def export(run_dir: str | os.PathLike[str], out: str | os.PathLike[str],
           overwrite: bool = False, best: bool = False) -> Path:
    """Write ``out`` (the state dict) and ``out`` with ``.json`` (the spec); see the module.

    Args:
        run_dir: A gnnpar-train run directory.
        out: The state dict file to write.
        overwrite: Replace an earlier export to ``out`` (only one gnnpar wrote).
        best: Export the best-valid model (``RUN/best``) instead of the newest checkpoint's.

    Returns:
        The ``.json`` file written.

    Raises:
        ConfigError: The run cannot be read (see :func:`~gnnpar.train.trained.load_trained`),
            or ``out`` may not be written.
        StorageError: The file system refused the write (nothing was replaced).
    """
    import torch

    from gnnpar.train.trained import load_trained

    target, meta, dec_path = export_files(out)
    files = [target, meta, dec_path]
    hint = "pass --overwrite to replace the model gnnpar-export wrote there, or another --out."
    check_output_files(files, overwrite, lambda f: f.name in _listed(meta), ConfigError,
                       field="--out", what="an exported model", overwrite_hint=hint)
    run, spec, model, decoder = load_trained(run_dir, best)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot be created ({exc.strerror or exc}).", path=target.parent,
                          field="--out", fix="pass an --out under a writable directory.") \
            from None
    with lock(target, ConfigError, "this exported model"):
        check_output_files(files, overwrite, lambda f: f.name in _listed(meta), ConfigError,
                           field="--out", what="an exported model", overwrite_hint=hint)
        before = _listed(meta)
        for f in files:
            remove_stale_temporaries(f)
        written: dict[str, Any] = {}
        if decoder:
            _save(torch, decoder, dec_path)
            written[dec_path.name] = file_entry(dec_path)
            spec["decoder_state"] = dec_path.name
            spec["decoder_layers"] = [f"Linear({v.shape[1]}, {v.shape[0]})" for k, v in
                                      decoder.items() if k.endswith(".weight")]
        _save(torch, model.state_dict(), target)
        written[target.name] = file_entry(target)
        write_json_atomic(meta, digested({
            "format": EXPORT_SPEC.format, "format_version": EXPORT_SPEC.version, **spec,
            "state_dict": target.name, "files": written, "source": run.source}))
        for name in before - set(written) - {meta.name}:  # an earlier export's decoder
            with contextlib.suppress(OSError):
                (meta.parent / name).unlink()
    return meta


def _save(torch: Any, state: dict[str, Any], path: Path) -> None:
    """``torch.save`` of the tensors, aside, then renamed into place.

    Serialised in memory first: torch's own file writer reports a full disk as a
    ``RuntimeError`` of its stream, Python's as the ``OSError`` it is.
    """
    buffer = io.BytesIO()
    torch.save({k: v.detach().cpu().contiguous() for k, v in state.items()}, buffer)
    with atomic_file(path, f"the exported {path.name}") as tmp, open(tmp, "wb") as f:
        f.write(buffer.getbuffer())


def build_parser() -> argparse.ArgumentParser:
    """The ``gnnpar-export`` argument parser."""
    p = ArgumentParser(prog=PROG, description="Write a trained run's model as a plain PyG "
                       "module's state_dict (--out FILE.pt) and its constructor arguments "
                       "(FILE.json), reloadable without gnnpar.",
                       epilog=f"Example: {PROG} runs/sbm-sample --out model.pt")
    p.add_argument("run_dir", metavar="RUN_DIR", help="a gnnpar-train run directory")
    p.add_argument("--out", required=True, metavar="FILE.pt", help="the state_dict to write")
    p.add_argument("--overwrite", action="store_true",
                   help="replace an earlier gnnpar-export to the same --out")
    p.add_argument("--best", action="store_true",
                   help="export the best-valid model (RUN_DIR/best) instead of the newest "
                   "checkpoint's")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``gnnpar-export``; the exit status."""
    args = build_parser().parse_args(argv)
    try:
        meta = export(args.run_dir, args.out, args.overwrite, args.best)
    except GnnparError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 1
    print(f"{args.out}: the PyG model's state_dict; {meta}: its class and constructor "
          "arguments (torch.load(weights_only=True) and the class rebuild it)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
