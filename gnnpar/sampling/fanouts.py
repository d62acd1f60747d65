"""Fan-outs: the neighbours sampled per hop (and per relation on a typed graph), one value.

:class:`Fanouts` is parsed and validated once, from a list per hop or, on a typed graph,
a list per relation; it is immutable, and :meth:`Fanouts.for_graph` caps it at the
largest in-degree of the whole graph (one all-gather) before a sampler is built from it,
so a sampler never changes its fan-outs and every rank samples with the same ones.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gnnpar.comm import all_gather_ints
from gnnpar.distributed import DistContext
from gnnpar.errors import ConfigError
from gnnpar.storage.graph import DistGraph
from gnnpar.typed import EdgeType, TypedLayout, relation_key

FanoutSpec = Sequence[int] | Mapping[EdgeType | str, Sequence[int]]
"""What a user gives: one list of fan-outs per hop (for every relation of a typed graph),
or a list per relation (keyed by ``(src, rel, dst)``, ``"src__rel__dst"`` or, when
unique, the relation's name)."""


def resolve_relation(key: EdgeType | str, layout: TypedLayout) -> EdgeType:
    """The relation ``key`` names: ``(src, rel, dst)``, ``"src__rel__dst"`` or a unique name."""
    rels = list(layout.edge_types)
    if isinstance(key, tuple) and key in rels:
        return rels[rels.index(key)]
    by_name = [r for r in rels if relation_key(r) == key or r[1] == key]
    if len(by_name) != 1:
        raise ConfigError(f"{key!r} names {len(by_name)} relations of the graph, not one.",
                          field="fanouts", fix="name a relation as src__rel__dst, one of "
                          f"{', '.join(map(relation_key, rels))}.")
    return by_name[0]


def _hops(value: object) -> tuple[int, ...]:
    """A non-empty list of ints >= 1; raise :class:`ConfigError` naming the fix."""
    if not isinstance(value, (list, tuple)) or not value:
        raise ConfigError(f"got {value!r}; need a non-empty list of neighbours per hop.",
                          field="fanouts", fix="pass e.g. fanouts=[15, 10].")
    for i, k in enumerate(value):
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ConfigError(f"hop {i} has fan-out {k!r}; every fan-out must be an int >= 1.",
                              field="fanouts", fix="pass positive integers, e.g. [15, 10].")
    return tuple(value)


def _per_relation(value: Mapping[EdgeType | str, Sequence[int]],
                  layout: TypedLayout) -> tuple[tuple[int, ...], ...]:
    """``[R][L]`` from a list per relation (``0`` skips a relation at a hop)."""
    rels = list(layout.edge_types)
    given: dict[EdgeType, tuple[int, ...]] = {}
    for key, hops in value.items():
        rel = resolve_relation(key, layout)
        listed = list(hops)
        if not listed or any(isinstance(k, bool) or not isinstance(k, int) or k < 0
                             for k in listed):
            raise ConfigError(f"relation {relation_key(rel)} has fan-outs {hops!r}.",
                              field="fanouts", fix="give ints >= 0 per hop, e.g. [10, 5].")
        given[rel] = tuple(listed)
    missing = [relation_key(r) for r in rels if r not in given]
    if missing:
        raise ConfigError(f"no fan-outs for {', '.join(missing)}.", field="fanouts",
                          fix="give every relation its fan-outs (0 to skip it), or one "
                          "list for all.")
    depth = {len(v) for v in given.values()}
    if len(depth) != 1:
        raise ConfigError(f"relations have fan-out lists of lengths {sorted(depth)}.",
                          field="fanouts", fix="give every relation one fan-out per hop.")
    return tuple(given[r] for r in rels)


@dataclass(frozen=True)
class Fanouts:
    """Neighbours sampled per relation and hop: validated, immutable.

    Attributes:
        per_relation: ``[R][L]`` fan-outs of each relation at each hop; one relation on a
            homogeneous graph (all ``>= 1``), the layout's relations in order on a typed
            one (``0`` skips a relation at a hop).

    Example::

        fanouts = Fanouts.for_graph([15, 10], graph, ctx)   # collective: capped
        sampler = DistNeighborSampler(graph, ctx, fanouts, seed=0)
    """

    per_relation: tuple[tuple[int, ...], ...]

    @classmethod
    def parse(cls, value: FanoutSpec, layout: TypedLayout | None = None) -> Fanouts:
        """Validate ``value``; raise :class:`ConfigError` naming the fix.

        Args:
            value: A list per hop; on a typed graph (``layout``) also a mapping, a list per
                relation.
            layout: The typed graph's types (``None``: homogeneous).
        """
        if isinstance(value, Mapping):
            if layout is None:
                raise ConfigError("fan-outs per relation need a typed graph.",
                                  field="fanouts", fix="pass one list, e.g. [15, 10].")
            return cls(_per_relation(value, layout))
        hops = _hops(value)
        return cls(tuple(hops for _ in (layout.edge_types if layout is not None else [0])))

    @classmethod
    def for_graph(cls, value: FanoutSpec, graph: DistGraph, ctx: DistContext,
                  replace: bool = False) -> Fanouts:
        """``value`` validated, then capped at the graph's largest in-degree (collective).

        One all-gather of each rank's largest owned in-degree, so every rank gets the
        same value (:meth:`capped`); without it with ``replace``, which draws
        ``fanout`` neighbours whatever the degree.
        """
        types = graph.meta.types
        fanouts = cls.parse(value, types.layout if types is not None else None)
        if replace:
            return fanouts
        own = int(graph.in_degree[: graph.num_owned].max()) if graph.num_owned else 0
        return fanouts.capped(int(all_gather_ints(ctx, [own]).max()))

    def capped(self, max_in_degree: int) -> Fanouts:
        """Fan-outs above ``max_in_degree`` narrowed to it: the same samples, smaller rows.

        Without replacement a node keeps ``min(k, d)`` in-edges, so a fan-out above every
        in-degree samples the same as one equal to the largest; rows and replies are
        ``[n, k]``, so this bounds their size by the graph rather than by the setting
        (``--fanouts 1000000000`` must not allocate by the billion).
        """
        cap = max(1, int(max_in_degree))
        return Fanouts(tuple(tuple(min(k, cap) for k in hops) for hops in self.per_relation))

    @property
    def num_hops(self) -> int:
        """Hops sampled (layers of the computation graph)."""
        return len(self.per_relation[0])

    @property
    def hops(self) -> tuple[int, ...]:
        """The fan-out of each hop of a homogeneous graph (its one relation)."""
        if len(self.per_relation) != 1:
            raise ConfigError(f"these fan-outs are per relation ({len(self.per_relation)}).",
                              field="fanouts", fix="use DistTypedNeighborSampler for a "
                              "typed graph.")
        return self.per_relation[0]
