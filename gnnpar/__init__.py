"""gnnpar: graph neural networks on graphs larger than one GPU, on torch.distributed."""

from gnnpar.errors import ConfigError, DatasetError, DistributedError, GnnparError, PartitionError

__version__ = "0.1.0"

__all__ = [
    "ConfigError",
    "DatasetError",
    "DistributedError",
    "GnnparError",
    "PartitionError",
    "__version__",
]
