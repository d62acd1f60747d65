"""Every command that reads against every hostile input (gnnpar.testing.conformance).

Each file a command reads of each artifact it takes is truncated, bit-flipped, swapped
from another artifact, given sizes of 10^13 and NaN values (with the digests rewritten to
match) and replaced by a pickle: the command must give one error line, no traceback,
write nothing, change nothing it read, and never run the pickle.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gnnpar.testing.conformance import (
    INPUT_CASES,
    RECIPES,
    Bench,
    check_input_case,
    input_targets,
)

CASES = [pytest.param(name, arg, rel, case, id=f"{name}|{arg}:{rel}|{case.name}")
         for name in RECIPES for arg, _, rel in input_targets(name) for case in INPUT_CASES
         if not (case.data_only and rel.endswith(".json"))]


@pytest.mark.parametrize(("recipe", "arg", "rel", "case"), CASES)
def test_hostile_input(bench: Bench, tmp_path: Path, recipe: str, arg: str, rel: str,
                       case: object) -> None:
    problems = check_input_case(bench, recipe, arg, rel, case, tmp_path)  # type: ignore[arg-type]
    assert not problems, "\n".join(problems)
