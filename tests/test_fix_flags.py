"""Every ``Fix:`` of every error names flags that exist.

The fixes are read from the source (each ``fix=`` argument's text, f-strings included),
so an error that is rare to trigger is checked too; each ``--flag`` in them must be a
flag of one of gnnpar's commands (their ``--help``) or of ``torchrun``.
"""

from __future__ import annotations

import argparse
import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
TORCHRUN = {"--nproc-per-node", "--nnodes", "--node-rank", "--rdzv-endpoint",
            "--rdzv-backend", "--rdzv-id", "--standalone"}
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9_-]*")


def _fix_flags() -> dict[str, str]:
    """``{flag: "file:line"}`` of every ``--flag`` in a ``fix=`` text."""
    found: dict[str, str] = {}
    for folder in ("gnnpar", "datasets", "partition"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if not isinstance(node, ast.Call):
                    continue
                for kw in node.keywords:
                    if kw.arg != "fix":
                        continue
                    for sub in ast.walk(kw.value):
                        if isinstance(sub, ast.Constant) and isinstance(sub.value, str):
                            for flag in FLAG.findall(sub.value):
                                found.setdefault(flag, f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def _parsers() -> list[argparse.ArgumentParser]:
    """The parser of every gnnpar command."""
    from gnnpar.datasets.__main__ import build_parser as datasets_parser
    from gnnpar.partition import cli as partition_cli
    from gnnpar.plot import build_parser as plot_parser
    from gnnpar.train.cli import build_parser as train_parser
    from gnnpar.train.export import build_parser as export_parser
    from gnnpar.train.predict import build_parser as predict_parser

    return [train_parser(), plot_parser(), predict_parser(), export_parser(), datasets_parser(),
            partition_cli._partition_parser(), partition_cli._verify_parser(),
            partition_cli._info_parser()]


def _known_flags() -> set[str]:
    return {o for p in _parsers() for a in p._actions for o in a.option_strings} | TORCHRUN


def test_every_fix_names_existing_flags() -> None:
    found = _fix_flags()
    assert len(found) > 30  # the scan sees the fixes
    known = _known_flags()
    unknown = {flag: where for flag, where in found.items() if flag not in known}
    assert not unknown, f"Fix: texts name flags no command has: {unknown}"


def test_old_spellings_are_refused_naming_the_new_one(capsys) -> None:  # type: ignore[no-untyped-def]
    from gnnpar.train.cli import main

    try:
        main(["--task", "link", "--strict_negatives"])
    except SystemExit as exc:
        assert exc.code == 2
    err = capsys.readouterr().err
    assert "--strict_negatives is spelt --strict-negatives" in err


def test_a_flag_prefix_is_refused_as_a_misspelt_flag(capsys) -> None:  # type: ignore[no-untyped-def]
    """argparse reads --fanout as --fanouts unless told not to: every parser is told."""
    from gnnpar.train.cli import parse

    with pytest.raises(SystemExit) as exc:
        parse(["--fanout", "5,5"])  # gnnpar-train --fanout 5,5
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "unrecognized arguments: --fanout. Fix: did you mean --fanouts" in err, err
    assert not any(p.allow_abbrev for p in _parsers())
    # The scripts' parsers (examples, benchmarks) are gnnpar's too, or say so themselves
    # (a subparser is of its parent's class: only plain argparse's need saying it).
    plain = []
    for folder in ("gnnpar", "datasets", "partition", "examples", "benchmarks"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            text = path.read_text()
            names = ("ArgumentParser", "add_parser") if "argparse.ArgumentParser(" in text \
                else ()
            for node in ast.walk(ast.parse(text)):
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                        and node.func.attr in names
                        and not any(k.arg == "allow_abbrev" for k in node.keywords)):
                    plain.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not plain, f"argparse parsers that take flag prefixes: {plain}"
