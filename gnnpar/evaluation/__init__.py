"""Evaluation: the metrics of a trained model over all ranks, each task in one module.

- :mod:`~gnnpar.evaluation.node` — node classification: accuracy of each split, exact
  on the whole partitioned graph (full-neighbour);
- :mod:`~gnnpar.evaluation.link` — link prediction: full-neighbour embeddings, scores of
  a split's positives and negatives, their metrics;
- :mod:`~gnnpar.evaluation.ranking` — OGB's ranking metrics (MRR, Hits@K) across ranks.

Import each name from its module; this package re-exports nothing.
"""
