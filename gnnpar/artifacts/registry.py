"""Every surface of gnnpar that writes or reads an artifact, with the paths it takes.

The conformance suite (``tests/conformance``) runs each of them against hostile outputs
and hostile inputs (:mod:`gnnpar.testing.conformance`), and fails when a console script
of the package (its entry points) is missing here: a new command is under the shared
contract the day it lands.

A surface names, for each path argument, the kind of artifact it writes or reads
(:mod:`gnnpar.artifacts.kinds`' keys, plus ``"export"`` and ``"picture"`` for the file
artifacts, and ``"spec"`` for a dataset spec that is not a gnnpar artifact).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Surface:
    """A command or public function and the artifacts it writes and reads.

    Attributes:
        name: The console script (``gnnpar-export``), ``python -m`` module, or the
            public function (``gnnpar.load_predictions``).
        entry: ``module:function`` that runs it (for a command, its ``main``).
        writes: Path argument -> the kind of artifact written there.
        reads: Path argument -> the kind of artifact read from there.
        command: Whether it is a command line (else a Python function).
    """

    name: str
    entry: str
    writes: dict[str, str] = field(default_factory=dict)
    reads: dict[str, str] = field(default_factory=dict)
    command: bool = True


SURFACES = (
    Surface("gnnpar-partition", "gnnpar.partition.cli:main",
            writes={"--out": "partition"}, reads={"DATASET": "dataset"}),
    Surface("gnnpar-partition verify", "gnnpar.partition.cli:main",
            reads={"DIR": "partition"}),
    Surface("gnnpar-partition info", "gnnpar.partition.cli:main",
            writes={"--plot": "picture"}, reads={"DIR": "partition"}),
    Surface("gnnpar-train", "gnnpar.train.cli:main",
            writes={"--out": "run"}, reads={"DATASET": "partition", "--resume": "run"}),
    Surface("gnnpar-predict", "gnnpar.train.predict:main",
            writes={"--out": "predictions"}, reads={"RUN_DIR": "run",
                                                    "DATASET": "partition"}),
    Surface("gnnpar-export", "gnnpar.train.export:main",
            writes={"--out": "export"}, reads={"RUN_DIR": "run"}),
    Surface("gnnpar-plot", "gnnpar.plot:main",
            writes={"--out": "picture"}, reads={"RECORD": "run", "--partition": "partition"}),
    Surface("python -m gnnpar.datasets", "gnnpar.datasets.__main__:main",
            writes={"--save": "dataset"}, reads={"DATASET": "dataset"}),
    Surface("gnnpar.partition_graph", "gnnpar.partition.writer:partition_graph",
            writes={"out_dir": "partition"}, command=False),
    Surface("gnnpar.load_partition", "gnnpar.partition.format:load_partition",
            reads={"out_dir": "partition"}, command=False),
    Surface("gnnpar.GraphDataset.save", "gnnpar.datasets.graph:GraphDataset.save",
            writes={"out_dir": "dataset"}, command=False),
    Surface("gnnpar.load_dataset", "gnnpar.datasets.spec:load_dataset",
            reads={"path": "dataset"}, command=False),
    Surface("gnnpar.Trainer", "gnnpar.train.trainer:Trainer",
            writes={"cfg.run.out": "run"}, reads={"part_dir": "partition"}, command=False),
    Surface("gnnpar.load_predictions", "gnnpar.train.predictions:load_predictions",
            reads={"path": "predictions"}, command=False),
    Surface("gnnpar.train.export.export", "gnnpar.train.export:export",
            writes={"out": "export"}, reads={"run_dir": "run"}, command=False),
    Surface("gnnpar.plot.plot_records", "gnnpar.plot:plot_records",
            writes={"out": "picture"}, reads={"paths": "run"}, command=False),
)
"""Every surface under the shared contract."""


def commands() -> dict[str, Surface]:
    """The command surfaces by console-script name (subcommands under their script)."""
    return {s.name: s for s in SURFACES if s.command}
