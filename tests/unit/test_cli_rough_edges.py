"""What a new user of the `kb` CLI and of `kb serve` meets first: flags, routes, tokens and error bodies
that say what went wrong and what to do (unit tests on embedded state; no network)."""

from __future__ import annotations

import argparse
import json

import pytest

from kb_cli.main import build_parser, parse


def _parsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    found = [parser]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):
                found += _parsers(sub)
    return found


def test_g_local_no_kb_parser_accepts_an_abbreviated_flag():
    """G-LOCAL: every parser and sub-parser of `kb` takes flags only as spelled (`--rout` is refused)."""
    parsers = _parsers(build_parser())
    assert len(parsers) > 30
    assert [p.prog for p in parsers if p.allow_abbrev] == []


@pytest.mark.parametrize(
    "argv",
    [
        ["search", "--rout", "demo", "query"],
        ["search", "--ruote", "demo", "query"],
        ["token", "issue", "--rout", "demo"],
    ],
)
def test_g_local_a_misspelled_flag_is_named_as_unrecognized(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        parse(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    flag = next(a for a in argv if a.startswith("--"))
    assert f"unrecognized arguments: {flag}" in err
    assert "did you mean --route?" in err


def test_g_local_kb_models_refuses_an_abbreviated_flag(capsys):
    from kb_cli import models

    with pytest.raises(SystemExit):
        models.main(["fetch", "--lex"])
    assert "unrecognized arguments: --lex" in capsys.readouterr().err


def test_a_search_kb_search_json_with_no_hint_carries_the_reasons(capsys):
    """A-SEARCH: `kb search --json` with an empty answer carries the reasons the plain output prints
    (here: the route points at no agent), next to the search API's own fields."""
    answer = {"status": "ok", "hints": [], "truncated": False}

    def call(endpoint, method, path, body=None, headers=None):
        return {"workspaces": []} if path == "/admin/v1/workspaces" else answer

    plain = build_parser().parse_args(["search", "--route", "plant", "--token", "t", "pump"])
    assert plain.func(plain, call) == 0
    printed = [line.strip("- ").strip() for line in capsys.readouterr().out.splitlines()[1:]]
    as_json = build_parser().parse_args(["search", "--route", "plant", "--token", "t", "--json", "pump"])
    assert as_json.func(as_json, call) == 0
    out = json.loads(capsys.readouterr().out)
    assert out == {**answer, "no_hints": printed}
    assert "plant" in out["no_hints"][0]
