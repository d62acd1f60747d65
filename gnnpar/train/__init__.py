"""What drives a training run: configuration, ``Trainer``, launcher, run record, checkpoints.

The runtime primitives (graph, feature store, sampler, loader, communication, layers,
parallelism) live in ``gnnpar`` itself; this package composes them into ``gnnpar-train``.
"""

from gnnpar.train.config import (
    Config,
    FullConfig,
    ModelConfig,
    RunConfig,
    SampleConfig,
    TrainConfig,
)

__all__ = ["Config", "FullConfig", "ModelConfig", "RunConfig", "SampleConfig", "TrainConfig"]
