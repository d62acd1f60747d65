"""The registry covers every command, and the harness fails on a planted regression."""

from __future__ import annotations

from pathlib import Path

import pytest

import gnnpar.train.export as export_module
from gnnpar.artifacts.registry import SURFACES
from gnnpar.testing.conformance import (
    OUTPUT_CASES,
    RECIPES,
    Bench,
    check_output_case,
    registered_commands,
    surface_of,
    unregistered,
)


def test_every_console_script_is_registered_with_a_recipe() -> None:
    scripts = registered_commands()
    assert {"gnnpar-partition", "gnnpar-train", "gnnpar-predict", "gnnpar-export",
            "gnnpar-plot"} <= scripts  # read from the installed package's entry points
    assert unregistered() == []
    commands = {s.name for s in SURFACES if s.command}
    assert {surface_of(r) for r in RECIPES} == commands


def test_an_unregistered_console_script_fails_the_registry(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import gnnpar.testing.conformance as conformance

    monkeypatch.setattr(conformance, "registered_commands",
                        lambda: {*registered_commands(), "gnnpar-new"})
    assert conformance.unregistered() == ["gnnpar-new"]


def test_the_harness_fails_on_a_planted_regression(bench: Bench, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """gnnpar-export without its ownership check replaces a user's file: caught."""
    case = next(c for c in OUTPUT_CASES if c.name == "user file beside")
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    assert check_output_case(bench, "gnnpar-export", case, tmp_path / "a") == []
    monkeypatch.setattr(export_module, "check_output_files", lambda *a, **k: None)
    problems = check_output_case(bench, "gnnpar-export", case, tmp_path / "b")
    assert any("changed model.json" in p for p in problems), problems
