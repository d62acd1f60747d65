"""Build script: the packages are found, not listed (``setup.cfg`` holds the metadata).

``gnnpar`` and its subpackages live in ``gnnpar/``; the two offline stages live in the
top-level folders ``datasets/`` and ``partition/`` (the package's specification puts them
there; README.md's table of stages) and are installed as ``gnnpar.datasets`` and
``gnnpar.partition``.  A new subpackage anywhere under them reaches the wheel without
editing this file.
"""

from setuptools import find_packages, setup

STAGES = ("datasets", "partition")
"""Top-level folders installed as ``gnnpar.<folder>``."""

setup(
    packages=[*find_packages(include=["gnnpar", "gnnpar.*"]),
              *(f"gnnpar.{p}" for p in find_packages(
                  include=[*STAGES, *(f"{s}.*" for s in STAGES)]))],
    package_dir={"gnnpar": "gnnpar", **{f"gnnpar.{s}": s for s in STAGES}},
)
