"""``python -m gnnpar.train`` is ``gnnpar-train`` (e.g. ``torchrun ... -m gnnpar.train``)."""

import sys

from gnnpar.train.cli import main

sys.exit(main())
