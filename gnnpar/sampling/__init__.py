"""Distributed sampling: in-neighbourhoods hop by hop, typed fan-outs, negatives.

- :mod:`~gnnpar.sampling.fanouts` — :class:`~gnnpar.sampling.fanouts.Fanouts`, the
  fan-outs per hop (and relation), validated and capped once, before a sampler is built;
- :mod:`~gnnpar.sampling.exchange` — :class:`~gnnpar.sampling.exchange.HopExchange`, a
  hop's three collectives, shared by both samplers;
- :mod:`~gnnpar.sampling.neighbor` — :class:`DistNeighborSampler`, counter-based keys
  (:mod:`gnnpar.keys`), PyG's ``NeighborLoader`` layout;
- :mod:`~gnnpar.sampling.typed` — :class:`DistTypedNeighborSampler`, fan-outs per
  relation in the same exchanges, its batch split by type
  (:class:`~gnnpar.sampling.typed.TypedSamplerOutput`);
- :mod:`~gnnpar.sampling.negative` — :class:`DistNegativeSampler`, uniform or strict
  (owners confirm non-edges);
- :mod:`~gnnpar.sampling.kernels` — the tensor kernels the samplers run per hop (draws,
  numbering of new nodes), without distributed state;
- :mod:`~gnnpar.sampling.compiled` — the CPU kernels compiled with numba (optional).
"""
