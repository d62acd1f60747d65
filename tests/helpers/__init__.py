"""Helpers of the tests, imported as ``tests.helpers.<module>``: graphs, workers, references.

Rank functions live here, at module level, so that spawned processes import them by name.
The PyG references and process helpers that the benchmarks use too are in
:mod:`gnnpar.testing` (``reference``, ``typed_reference``, ``procs``).
"""
