"""The bench of valid artifacts every conformance case starts from (made once per session)."""

from __future__ import annotations

import pytest

from gnnpar.testing.conformance import Bench


@pytest.fixture(scope="session")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Bench:
    return Bench(tmp_path_factory.mktemp("conformance-bench"))
