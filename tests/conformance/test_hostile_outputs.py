"""Every command that writes against every hostile output (gnnpar.testing.conformance).

Each case runs the command (in this process; a kill in a process of its own) at the
smallest size, with and without ``--overwrite`` where that applies, and fails on a
traceback, anything but one error line, a foreign byte changed, an earlier output lost
or half-overwritten, or a file left behind.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gnnpar.testing.conformance import OUTPUT_CASES, RECIPES, Bench, check_output_case

CASES = [pytest.param(name, case, id=f"{name}|{case.name}")
         for name, recipe in RECIPES.items() if recipe.output is not None
         for case in OUTPUT_CASES if recipe.output in case.kinds]


@pytest.mark.parametrize(("recipe", "case"), CASES)
def test_hostile_output(bench: Bench, tmp_path: Path, recipe: str, case: object) -> None:
    problems = check_output_case(bench, recipe, case, tmp_path)  # type: ignore[arg-type]
    assert not problems, "\n".join(problems)
