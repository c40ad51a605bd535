"""A leading ``~`` in a path efface takes is expanded, as a shell would, wherever it is given:
``efface.open``, ``backup``/``restore``, the CLI's ``--store``, ``--kek-file``, file options
and arguments. Before, ``efface.open("~/x")`` made a directory literally named ``~`` in the
working directory, and ``--store=~/x`` (no shell expansion after ``=``) did the same."""

from __future__ import annotations

import json
import os

import pytest
from click.testing import CliRunner

import efface
from efface.cli import cli


@pytest.fixture
def home(tmp_path, monkeypatch):
    """HOME is a fresh directory and the working directory another, so a literal ``~`` shows."""
    home = tmp_path / "home"
    work = tmp_path / "work"
    home.mkdir()
    work.mkdir()
    monkeypatch.setenv("HOME", os.fspath(home))
    monkeypatch.chdir(work)
    return home


def test_open_backup_and_restore_expand_a_leading_tilde(home):
    with efface.open("~/s", embedder="hashing", background=False) as store:
        assert store.path == os.fspath(home / "s")
        store.write("k1", "Alice prefers green tea", tenant="t", subject="alice", purpose="support")
        result = store.backup("~/b.efb")
        assert result.path == os.fspath(home / "b.efb") and (home / "b.efb").is_file()
        assert store.restore("~/b.efb").present == 1
    assert (home / "s").is_dir() and os.listdir(".") == []  # no directory named "~" here


def test_a_store_made_directly_expands_a_leading_tilde_as_open_does(home):
    """``Store(path, origin=...)`` took ``~/s`` literally (a directory named ``~`` here for
    its index files) where ``efface.open`` expanded it."""
    from efface.origin.memory import MemoryOrigin

    store = efface.Store("~/s", "hashing", origin=MemoryOrigin(), background=False)
    try:
        assert store.path == os.fspath(home / "s")
        store.write("k1", "Alice prefers green tea", tenant="t", subject="alice", purpose="support")
    finally:
        store.close()
    assert os.listdir(".") == []  # no directory named "~" here


def test_cli_expands_a_tilde_in_store_and_file_options(home):
    runner = CliRunner(env={"EFFACE_STORE": None, "EFFACE_TENANT": None, "EFFACE_ORIGIN": None})

    def run(*args, code=0):
        r = runner.invoke(cli, list(args))
        assert r.exit_code == code, (r.stdout, r.stderr)
        return r

    base = ["--store=~/s", "--embedder", "hashing"]
    run(*base, "write", "a:1", "Zebulon ordered tea", "--subject", "alice", "--purpose", "support")
    assert (home / "s").is_dir()
    run(*base, "backup", "~/b.efb")
    assert (home / "b.efb").is_file()
    receipt = json.loads(run(*base, "forget", "--subject", "alice", "--json").stdout)
    run(*base, "ledger", "export", receipt["handle"], "--out", "~/cert.json", "--html", "~/cert.html")
    assert json.loads((home / "cert.json").read_text())["handle"] == receipt["handle"]
    assert (home / "cert.html").read_text().lstrip().lower().startswith("<!doctype html")
    run("keys", "create", "--store", "~/s", "--tenant", "acme")
    assert (home / "s.keys.db").is_file()
    assert os.listdir(".") == []


def test_kek_file_paths_expand_a_tilde(home, monkeypatch):
    """``--kek-file ~/kek`` and ``EFFACE_KEK_FILE=~/kek`` name the file in the home directory."""
    from efface.origin.postgres.kekring import ENV, resolve_path

    assert resolve_path("~/kek") == home / "kek"
    monkeypatch.setenv(ENV, "~/env.kek")
    assert resolve_path(None) == home / "env.kek"
