"""Distributed sampling: in-neighbourhoods hop by hop, typed fan-outs, negatives.

- :mod:`~gnnpar.sampling.neighbor` — :class:`DistNeighborSampler`, three collectives per
  hop, counter-based keys (:mod:`gnnpar.keys`), PyG's ``NeighborLoader`` layout;
- :mod:`~gnnpar.sampling.typed` — :class:`DistHeteroNeighborSampler`, fan-outs per
  relation in the same exchanges;
- :mod:`~gnnpar.sampling.negative` — :class:`DistNegativeSampler`, uniform or strict
  (owners confirm non-edges);
- :mod:`~gnnpar.sampling.kernels` — the tensor kernels the samplers run per hop (draws,
  numbering of new nodes), without distributed state;
- :mod:`~gnnpar.sampling.compiled` — the CPU kernels compiled with numba (optional).
"""
