"""``python -m gnnpar.partition``: the same as ``gnnpar-partition``."""

from gnnpar.partition.cli import main

raise SystemExit(main())
