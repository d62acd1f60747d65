"""JSON documents gnnpar reads: UTF-8, parsed, of the expected format, undamaged.

Every marker and index gnnpar writes is a JSON object with ``format``, ``format_version``
and its own SHA-256 (``digest``, :func:`~gnnpar.artifacts.files.digested`).
:func:`read_document` checks all three before a field is used; :func:`read_json` only
parses (inputs written by people, such as an OGB ``meta_dict``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Collection
from pathlib import Path
from typing import Any

from gnnpar.artifacts.files import DIGEST_KEY, json_digest
from gnnpar.errors import GnnparError

MAX_DOCUMENT_BYTES = 256 << 20
"""The largest JSON document read (a marker lists files; it is never this large)."""


def read_json(path: str | os.PathLike[str], error: type[GnnparError] = GnnparError) -> Any:
    """Parse a JSON file, naming the file in the error when it is missing or invalid.

    The file must be UTF-8 (as JSON is): other bytes are an error naming their offset.
    """
    p = Path(path)
    if not p.is_file():
        raise error("file is missing.", path=p, fix="check the path.")
    try:
        if p.stat().st_size > MAX_DOCUMENT_BYTES:
            raise error(f"is {p.stat().st_size:,} bytes, more than a JSON document gnnpar "
                        f"reads ({MAX_DOCUMENT_BYTES:,}).", path=p,
                        fix="pass the file gnnpar wrote.")
        return json.loads(p.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise error(f"is not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset "
                    f"{exc.start}); it is damaged or not a JSON file.", path=p,
                    fix="re-create the file.") from None
    except (json.JSONDecodeError, RecursionError) as exc:
        raise error(f"invalid JSON ({str(exc)[:200]}).", path=p,
                    fix="re-create the file.") from None
    except OSError as exc:
        raise error(f"cannot be read ({exc.strerror or exc}).", path=p,
                    fix="check the file's permissions.") from None


def check_json_digest(doc: dict[str, Any], path: str | os.PathLike[str],
                      error: type[GnnparError] = GnnparError,
                      fix: str = "re-create it; never edit it by hand.") -> None:
    """Raise ``error`` unless ``doc`` (read from ``path``) holds its own, correct digest."""
    if DIGEST_KEY not in doc:
        raise error("the file has no digest field, so damage to it cannot be detected.",
                    path=path, field=DIGEST_KEY, fix="re-create it with this gnnpar version.")
    if doc[DIGEST_KEY] != json_digest(doc):
        raise error("the file was changed after it was written (its digest differs).",
                    path=path, field=DIGEST_KEY, fix=fix)


def read_document(path: str | os.PathLike[str], fmt: str, versions: Collection[int],
                  error: type[GnnparError], what: str, fix: str,
                  digest_from: int | None = None) -> dict[str, Any]:
    """A gnnpar JSON document, checked: of format ``fmt``, a readable version, undamaged.

    Args:
        path: The file.
        fmt: Its ``format`` field (``"gnnpar-predictions"``).
        versions: The ``format_version`` values read.
        error: The exception type.
        what: The document in messages (``"a predictions index"``).
        fix: What to do about a damaged or foreign file.
        digest_from: The first version that carries a digest (``None``: every version).

    Raises:
        error: Missing, not JSON, another format or version, or damaged.
    """
    doc = read_json(path, error)
    found = doc.get("format") if isinstance(doc, dict) else None
    if not isinstance(doc, dict) or found != fmt:
        raise error(f"is not {what} (format {found!r}, expected {fmt!r}).", path=path,
                    field="format", fix=fix)
    version = doc.get("format_version")
    if not isinstance(version, int) or isinstance(version, bool) or version not in versions:
        raise error(f"format_version is {version!r}; this gnnpar reads "
                    f"{', '.join(map(str, versions))}.", path=path, field="format_version",
                    fix="read it with the gnnpar version that wrote it, or write it again.")
    if digest_from is None or version >= digest_from:
        check_json_digest(doc, path, error, fix)
    return doc
