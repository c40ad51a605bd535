"""``efface gate proxy``'s command line: what it refuses before it starts anything."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from efface.cli import cli


@pytest.mark.parametrize(
    "args, words",
    [
        ([], "-- COMMAND"),
        (["--upstream-url", "http://127.0.0.1:9/mcp", "--", "node", "x.js"], "one of them"),
        (["--upstream-url", "http://127.0.0.1:9/mcp", "--header", "no-colon-zq"], "NAME: VALUE"),
        (["--settle", "-1", "--", "node"], "--settle"),
    ],
)
def test_usage_errors(args, words):
    result = CliRunner().invoke(cli, ["gate", "proxy", *args])
    assert result.exit_code == 2 and words in result.output and "zq" not in result.output


def test_a_bad_mapping_file_is_bad_input_without_its_values(tmp_path):
    path = tmp_path / "map.json"
    path.write_text(json.dumps({"tools": {"t": {"kind": "zq-secret"}}}))
    result = CliRunner().invoke(cli, ["gate", "proxy", "--map", str(path), "--", "node", "x.js"])
    assert result.exit_code == 2 and "kind" in result.output and "zq" not in result.output
