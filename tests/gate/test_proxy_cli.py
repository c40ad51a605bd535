"""``efface gate proxy``'s command line: what it refuses before it starts anything."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from click.testing import CliRunner

from child_env import child_env
from efface.cli import cli


@pytest.mark.parametrize(
    "args, words",
    [
        ([], "-- COMMAND"),
        (["--upstream-url", "http://127.0.0.1:9/mcp", "--", "node", "x.js"], "one of them"),
        (["--upstream-url", "http://127.0.0.1:9/mcp", "--header", "no-colon-zq"], "NAME: VALUE"),
        (["--settle", "-1", "--", "node"], "--settle"),
        # was taken and ignored: a command's upstream is spoken to over stdio
        (["--header", "Authorization: Bearer efk_zq", "--", "node", "x.js"], "--header goes with --upstream-url"),
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


@pytest.mark.parametrize(
    "upstream",
    [
        [sys.executable, "-c", "pass"],  # exits at once: not an MCP server
        ["--upstream-url", "http://zq:secret-pw@127.0.0.1:9/mcp"],  # nothing listens there
    ],
    ids=["command-exits", "url-unreachable"],
)
def test_an_upstream_that_cannot_be_reached_is_a_clear_error_not_a_traceback(tmp_path, upstream):
    """An upstream that exited at once, or a URL nothing answers, ended the proxy with the
    SDK's ExceptionGroup traceback (pages of it). Now one line saying what to check, exit 1,
    and never the URL (it may hold a password)."""
    args = ["--", *upstream] if upstream[0] != "--upstream-url" else upstream
    result = subprocess.run(
        [sys.executable, "-m", "efface", "gate", "proxy", "--state", str(tmp_path / "g.db"), *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=child_env(),
        timeout=120,
    )
    assert result.returncode == 1, result.stderr[-2000:]
    assert "could not be reached" in result.stderr and "Traceback" not in result.stderr
    assert "secret-pw" not in result.stderr + result.stdout
