"""What drives a training run: configuration, ``Trainer``, launcher, run record, checkpoints.

The runtime primitives (graph, feature store, sampler, loader, communication, layers,
parallelism) live in ``gnnpar`` itself; this package composes them into ``gnnpar-train``.
Import each name from its module; this package re-exports nothing.
"""
