"""The typed-graph vocabulary every floor shares: edge types, the typed layout, relation keys.

A typed graph has node types and relations ``(src_type, relation, dst_type)`` (PyG's
``HeteroData``).  The datasets stage (:class:`~gnnpar.datasets.typed.TypedGraphDataset`),
the partition stage, the sampler and the models all speak of it in these words, so none
of them imports another for them:

- :data:`EdgeType` — a relation, as PyG's edge types;
- :class:`TypedLayout` — the types and id ranges of a typed graph's homogeneous view;
- :func:`relation_key` — a relation as one string, ``"src__rel__dst"``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gnnpar.errors import DatasetError

EdgeType = tuple[str, str, str]
"""``(src_type, relation, dst_type)``, as PyG's edge types."""


def relation_key(edge_type: EdgeType) -> str:
    """``"src__rel__dst"``: an edge type as one string (configs, CLI, records)."""
    return "__".join(edge_type)


@dataclass(frozen=True)
class TypedLayout:
    """Types and id ranges of a typed graph's homogeneous view (JSON-able).

    Attributes:
        node_types: Node type names; type ``t`` is ``node_types[t]``.
        edge_types: Relations ``(src_type, relation, dst_type)``; relation ``r`` is
            ``edge_types[r]``.
        target: The node type with labels and splits.
        node_offsets: ``T + 1`` ascending ids: type ``t`` holds homogeneous node ids
            ``node_offsets[t] .. node_offsets[t+1]``.
        edge_offsets: ``R + 1`` ascending ids: relation ``r`` holds homogeneous edge ids
            ``edge_offsets[r] .. edge_offsets[r+1]``.
        feat_dims: ``T`` feature widths (0 for a featureless type).
    """

    node_types: tuple[str, ...]
    edge_types: tuple[EdgeType, ...]
    target: str
    node_offsets: tuple[int, ...]
    edge_offsets: tuple[int, ...]
    feat_dims: tuple[int, ...]

    @property
    def num_nodes(self) -> int:
        """Total number of nodes ``N`` (all types)."""
        return self.node_offsets[-1]

    @property
    def num_edges(self) -> int:
        """Total number of edges ``E`` (all relations)."""
        return self.edge_offsets[-1]

    def type_index(self, name: str) -> int:
        """The index of node type ``name``.

        Raises:
            DatasetError: No such node type (field ``node_types``).
        """
        try:
            return self.node_types.index(name)
        except ValueError:
            raise DatasetError(f"no node type {name!r} (types: {', '.join(self.node_types)}).",
                               field="node_types", fix="use one of the graph's node types."
                               ) from None

    def relation_index(self, edge_type: Sequence[str]) -> int:
        """The index of relation ``(src_type, relation, dst_type)``.

        Raises:
            DatasetError: No such relation (field ``edge_types``).
        """
        key = tuple(edge_type)
        for r, et in enumerate(self.edge_types):
            if et == key:
                return r
        raise DatasetError(f"no relation {key!r}.", field="edge_types",
                           fix="use one of the graph's edge types (src, relation, dst).")

    def src_types(self) -> tuple[int, ...]:
        """Per relation, the index of its source node type."""
        return tuple(self.node_types.index(s) for s, _, _ in self.edge_types)

    def dst_types(self) -> tuple[int, ...]:
        """Per relation, the index of its destination node type."""
        return tuple(self.node_types.index(d) for _, _, d in self.edge_types)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (lists for tuples); :meth:`from_dict` reads it back."""
        return {"node_types": list(self.node_types),
                "edge_types": [list(et) for et in self.edge_types], "target": self.target,
                "node_offsets": list(self.node_offsets),
                "edge_offsets": list(self.edge_offsets), "feat_dims": list(self.feat_dims)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any],
                  path: str | os.PathLike[str] | None = None) -> TypedLayout:
        """Parse :meth:`to_dict`'s form, checking every field.

        Args:
            d: The mapping (e.g. from JSON).
            path: The file it came from, named in errors.

        Raises:
            DatasetError: A field is missing or inconsistent (naming the field).
        """
        fix = "re-write the file with this gnnpar version."

        def fail(fld: str, msg: str) -> DatasetError:
            return DatasetError(msg, path=path, field=fld, fix=fix)

        if not isinstance(d, Mapping):
            raise fail("layout", f"must be an object, got {type(d).__name__}.")
        for key in ("node_types", "edge_types", "target", "node_offsets", "edge_offsets",
                    "feat_dims"):
            if key not in d:
                raise fail(key, "field is missing.")
        node_types = d["node_types"]
        if (not isinstance(node_types, list) or not node_types
                or not all(isinstance(t, str) and t for t in node_types)
                or len(set(node_types)) != len(node_types)):
            raise fail("node_types", "must be a non-empty list of distinct names.")
        edge_types = d["edge_types"]
        if not isinstance(edge_types, list) or not all(
                isinstance(et, list) and len(et) == 3 and all(isinstance(p, str) for p in et)
                for et in edge_types):
            raise fail("edge_types", "must be a list of [src_type, relation, dst_type].")
        ets = [(et[0], et[1], et[2]) for et in edge_types]
        if len(set(ets)) != len(ets):
            raise fail("edge_types", "holds a relation twice.")
        for et in ets:
            if et[0] not in node_types or et[2] not in node_types:
                raise fail("edge_types", f"{list(et)} names a type outside node_types.")
        if d["target"] not in node_types:
            raise fail("target", f"{d['target']!r} is not one of node_types.")

        def ints(key: str, length: int, ascending: bool) -> tuple[int, ...]:
            v = d[key]
            if (not isinstance(v, list) or len(v) != length
                    or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0
                               for i in v)):
                raise fail(key, f"must be a list of {length} integers >= 0.")
            if ascending and (v[0] != 0 or any(b < a for a, b in zip(v, v[1:], strict=False))):
                raise fail(key, "must ascend from 0.")
            return tuple(v)

        return cls(node_types=tuple(node_types), edge_types=tuple(ets), target=d["target"],
                   node_offsets=ints("node_offsets", len(node_types) + 1, True),
                   edge_offsets=ints("edge_offsets", len(ets) + 1, True),
                   feat_dims=ints("feat_dims", len(node_types), False))
