"""The command line under hostile input: bytes that are not text on stdin, stored terminal
escape sequences, usage errors that would repeat personal data, and handles of another
tenant. Through click's runner, and as ``python -m efface`` where the encoding of the real
standard streams matters.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import efface
from efface.cli import cli

SECRET = "alice.secret@example.com"
"""A value that stands for personal data: no error may repeat it."""

# ESC, CSI (7-bit and the one-byte C1 form), OSC (retitle), BEL, a clear screen, CR, backspace,
# DEL, and a right-to-left override.
HOSTILE = "\x1b[31mred\x1b[0m \x9b2J \x1b]0;pwned\x07 \x1b[2J\r\x08\x7f \u202eevil"
CONTROLS = {chr(c) for c in (*range(0x00, 0x09), *range(0x0B, 0x20), 0x7F, *range(0x80, 0xA0))} | {"\u202e"}


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner(env={"EFFACE_STORE": None, "EFFACE_TENANT": None, "COLUMNS": "250"})


@pytest.fixture
def store_dir(tmp_path: Path) -> str:
    return os.fspath(tmp_path / "store")


def run(runner, store_dir, *args, code=None, input=None):
    result = runner.invoke(cli, ["--store", store_dir, "--embedder", "hashing", *args], input=input)
    if code is not None:
        assert result.exit_code == code, (result.exit_code, result.stdout, result.stderr, result.exception)
    assert "Traceback" not in result.stdout + result.stderr
    return result


# -- stdin that is not valid text ---------------------------------------------------------------------
def test_invalid_utf8_on_stdin_is_bad_input_in_the_runner(runner, store_dir):
    for command in (
        ["write", "k", "-", "--subject", "s", "--purpose", "support"],
        ["quarantine", "rederive", "k", "-"],
    ):
        result = run(runner, store_dir, *command, code=2, input=b"caf\xe9 \xff\xfe")
        assert "standard input is not valid utf-8 text" in result.stderr
    doc = json.loads(
        run(
            runner,
            store_dir,
            "--json",
            "write",
            "k",
            "-",
            "--subject",
            "s",
            "--purpose",
            "support",
            code=2,
            input=b"\xff",
        ).stdout
    )
    assert doc["error"]["type"] == "InvalidInput"
    with efface.open(store_dir, embedder="hashing", background=False) as s:
        assert s.stats()["records"] == 0


def test_invalid_utf8_on_stdin_with_pythonioencoding_utf8(tmp_path):
    store = os.fspath(tmp_path / "store")
    env = {**os.environ, "PYTHONIOENCODING": "utf-8", "PYTHONPATH": os.pathsep.join(sys.path)}
    env.pop("EFFACE_STORE", None)
    args = [sys.executable, "-m", "efface", "--store", store, "--embedder", "hashing"]
    write = ["write", "k", "-", "--subject", "s", "--purpose", "support"]
    done = subprocess.run([*args, *write], input=b"caf\xe9 au lait \xff", capture_output=True, env=env, timeout=120)
    assert done.returncode == 2, done.stderr
    assert b"Traceback" not in done.stderr and b"UnicodeDecodeError" not in done.stderr
    assert b"standard input is not valid utf-8 text" in done.stderr
    done = subprocess.run([*args, "--json", *write], input=b"\xff\xfe", capture_output=True, env=env, timeout=120)
    assert done.returncode == 2 and done.stderr == b""
    assert json.loads(done.stdout)["error"]["type"] == "InvalidInput"
    # valid UTF-8 still goes in
    done = subprocess.run([*args, *write], input="café au lait".encode(), capture_output=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr


# -- stored terminal escape sequences are shown escaped ------------------------------------------------
def test_every_human_rendering_escapes_terminal_controls(runner, store_dir):
    key = "k" + HOSTILE
    with efface.open(store_dir, embedder="hashing", background=False) as s:
        s.register_subject("s" + HOSTILE, tenant="default", identifiers=["Zed Hostile"])
        s.write(
            key,
            "tea " + HOSTILE,
            tenant="default",
            subject="s" + HOSTILE,
            purpose="support",
            metadata={"m": HOSTILE},
            sources=["src" + HOSTILE],
        )
        s.retain(key, tenant="default", subject="other" + HOSTILE, purpose="support", basis="contract")
        s.write("src" + HOSTILE, "the source", tenant="default", subject="x", purpose="support")
        s.write(
            "d" + HOSTILE,
            "digest of the source",
            tenant="default",
            subject="y",
            purpose="support",
            sources=["src" + HOSTILE],
        )
    outputs = {
        "read": run(runner, store_dir, "read", key, "--purpose", "support", code=0).stdout,
        "recall": run(runner, store_dir, "recall", "tea", "--purpose", "support", code=0).stdout,
        "forget retained": run(runner, store_dir, "forget", "--subject", "s" + HOSTILE, code=0).stdout,
        "forget quarantined": run(runner, store_dir, "forget", "--key", "src" + HOSTILE, code=0).stdout,
        "quarantine": run(runner, store_dir, "quarantine", code=0).stdout,
    }
    handle = json.loads(run(runner, store_dir, "--json", "receipts", code=0).stdout)["receipts"][-1]["handle"]
    outputs["status"] = run(runner, store_dir, "status", handle, code=0).stdout
    outputs["wait"] = run(runner, store_dir, "wait", handle).stdout
    outputs["receipts"] = run(runner, store_dir, "receipts", code=0).stdout
    outputs["ledger"] = run(runner, store_dir, "ledger", code=0).stdout
    outputs["verify"] = run(runner, store_dir, "verify", handle).stdout
    for name, out in outputs.items():
        leaked = sorted({f"U+{ord(c):04X}" for c in out if c in CONTROLS})
        assert not leaked, f"{name} printed raw control characters {leaked}"
    for name in ("read", "recall", "forget retained", "forget quarantined", "quarantine"):
        assert "\\x1b[31mred" in outputs[name], name  # shown, as an escape
    assert "\\x9b2J" in outputs["read"] and "\\u202eevil" in outputs["read"] and "\\x07" in outputs["read"]


# -- usage errors name the option, never the value ----------------------------------------------------
USAGE = [
    ["write", "k", "t", "--subject", "s", "--purpose", "support", "--ttl", SECRET],
    ["recall", "q", "--purpose", "support", "-k", SECRET],
    ["--embedder", SECRET, "read", "k", "--purpose", "support"],
    ["read", "k", "--purpose", "support", "--embedder", SECRET],
    ["wait", "h", "--until", SECRET],
    ["wait", "h", "--timeout", SECRET],
    ["policy", SECRET],
    ["audit", SECRET, "somewhere"],
    ["write", "k", "--" + SECRET, "--subject", "s", "--purpose", "support"],
    ["write", "k", "text", SECRET, "--subject", "s", "--purpose", "support"],
    [SECRET],
    ["ledger", SECRET],
    [f"--{SECRET}", "read", "k"],
]


@pytest.mark.parametrize("args", USAGE, ids=lambda a: " ".join(x.replace(SECRET, "SECRET") for x in a))
def test_usage_errors_do_not_repeat_the_value(runner, store_dir, args):
    result = run(runner, store_dir, *args, code=2)
    assert SECRET not in result.stdout + result.stderr
    assert "Usage:" in result.stderr and "Error:" in result.stderr
    result = run(runner, store_dir, "--json", *args, code=2)
    assert SECRET not in result.stdout + result.stderr
    doc = json.loads(result.stdout)
    assert set(doc) == {"error"} and doc["error"]["message"]


def test_usage_errors_still_say_which_option_and_what_it_takes(runner, store_dir):
    err = run(runner, store_dir, "write", "k", "t", "--subject", "s", "--purpose", "p", "--ttl", SECRET, code=2).stderr
    assert "'--ttl'" in err and "must be a number" in err
    err = run(runner, store_dir, "--embedder", SECRET, "compact", code=2).stderr
    assert "'--embedder'" in err and "hashing, minilm" in err
    err = run(runner, store_dir, "--tennant", "x", "compact", code=2).stderr
    assert "Did you mean --tenant?" in err
    err = run(runner, store_dir, "read", "k", code=2).stderr
    assert "Missing option '--purpose'" in err


def test_a_path_in_a_usage_error_is_not_repeated(runner, store_dir, tmp_path):
    private = tmp_path / SECRET
    private.mkdir()
    result = run(runner, store_dir, "backup", os.fspath(private), code=2)
    assert SECRET not in result.stderr and "'DEST'" in result.stderr and "not a directory" in result.stderr


# -- status and wait stay inside --tenant ------------------------------------------------------------
@pytest.mark.parametrize("command", [["status"], ["wait", "--timeout", "5"]])
def test_status_and_wait_refuse_another_tenants_erasure(runner, store_dir, command):
    run(
        runner,
        store_dir,
        "--tenant",
        "acme",
        "write",
        "k",
        "Alice's note",
        "--subject",
        "alice",
        "--purpose",
        "support",
        code=0,
    )
    receipt = json.loads(
        run(runner, store_dir, "--tenant", "acme", "--json", "forget", "--subject", "alice", code=0).stdout
    )
    handle = receipt["handle"]
    name, *opts = command
    for other in (["--tenant", "globex"], []):  # another tenant, and the default one
        result = run(runner, store_dir, *other, "--json", name, handle, *opts, code=1)
        doc = json.loads(result.stdout)
        assert doc == {"error": {"type": "NotFound", "message": doc["error"]["message"]}}
        assert handle not in result.stdout
        human = run(runner, store_dir, *other, name, handle, *opts, code=1)
        assert "Erasure" not in human.stdout and "no receipt with that handle" in human.stderr
    doc = json.loads(run(runner, store_dir, "--tenant", "acme", "--json", name, handle, *opts, code=0).stdout)
    assert doc["handle"] == handle


# -- server options out of range --------------------------------------------------------------------
@pytest.mark.parametrize(
    "args",
    [
        ["serve", "--port", "99999"],
        ["serve", "--port", "-1"],
        ["serve", "--max-body", "0"],
        ["serve", "--max-body", "-5"],
        ["serve", "--max-wait", "-1"],
        ["serve", "--max-wait", "nan"],
        ["serve", "--max-wait", "inf"],
        ["mcp", "--transport", "http", "--port", "70000"],
    ],
    ids=lambda a: "-".join(a).replace("--", ""),
)
def test_a_server_option_out_of_range_is_a_usage_error_before_anything_starts(runner, store_dir, args):
    """`serve --port 99999` announced "running on http://127.0.0.1:99999" while it listened on
    port 34463 (99999 mod 65536); a negative --max-body refused every request, and a negative
    or NaN --max-wait reached the store's wait."""
    result = run(runner, store_dir, *args, code=2)
    assert args[-2] in result.stderr
    assert not os.path.exists(store_dir)  # refused while parsing: no store opened, no server started


@pytest.mark.parametrize("tenant", ["", "   "])
def test_an_empty_tenant_is_refused_not_taken_for_the_default_one(runner, store_dir, tenant):
    """`--tenant ""` (an unset shell variable: `--tenant "$T"`) acted on the 'default' tenant:
    a forget meant for one tenant released the claims of another."""
    run(runner, store_dir, "write", "k1", "Alice prefers green tea", "--subject", "alice", "--purpose", "support")
    result = run(runner, store_dir, "--tenant", tenant, "forget", "--subject", "alice", code=2)
    assert "--tenant" in result.stderr
    kept = run(runner, store_dir, "--json", "read", "k1", "--purpose", "support", code=0)
    assert json.loads(kept.stdout)["memory"]["text"] == "Alice prefers green tea"
