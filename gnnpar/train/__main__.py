"""``python -m gnnpar.train`` is ``gnnpar-train`` (e.g. ``torchrun ... -m gnnpar.train``)."""

from gnnpar.train.cli import command

command()
