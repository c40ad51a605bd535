"""The service stack is the ``serve`` extra: ``import efface``, the embedded store, the client
and ``efface demo`` run without it, and ``efface serve`` / ``efface mcp`` say how to install it.

"Without it" is a child interpreter in which importing any module of the stack fails (its
``sys.modules`` entry set to None, which is how Python reports a package that is not there),
so the test does not depend on what this machine has installed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

STACK = ("fastapi", "uvicorn", "mcp", "starlette", "anyio", "httptools", "uvloop", "sse_starlette")

CHILD = """
import json, sys
for name in {stack!r}:
    sys.modules[name] = None  # `import name` now raises ImportError, as when it is not installed

import efface
from click.testing import CliRunner
from efface.cli import cli

out = {{}}
with efface.open(sys.argv[1], embedder="hashing", background=False) as store:
    store.write("k", "Alice prefers green tea", tenant="acme", subject="alice", purpose="support")
    receipt = store.forget(tenant="acme", subject="alice")
    out["erased"] = list(receipt.erased)
    out["level"] = store.wait(receipt.handle, timeout=30).erased
out["client"] = efface.Client.__name__
runner = CliRunner()
for args in (["serve", "--store", sys.argv[1] + "-2"], ["mcp", "--store", sys.argv[1] + "-3"]):
    r = runner.invoke(cli, args)
    out[args[0]] = [r.exit_code, r.output]
r = runner.invoke(cli, ["demo", "--json"])
out["demo"] = [r.exit_code, json.loads(r.output)["summary"] if r.exit_code == 0 else r.output]
out["loaded"] = sorted(m for m in sys.modules if m.split(".")[0] in {stack!r} and sys.modules[m] is not None)
out["service_loaded"] = sorted(m for m in sys.modules if m.startswith(("efface.service.http", "efface.service.mcp")))
print(json.dumps(out))
"""


def test_library_client_and_demo_run_without_the_service_stack(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(
        [sys.executable, "-c", CHILD.format(stack=STACK), str(tmp_path / "s")],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["erased"] == ["k"] and out["level"] is True
    assert out["client"] == "Client"
    for command in ("serve", "mcp"):
        code, text = out[command]
        assert code == 1, text
        assert f"efface {command} needs efface's service stack" in text
        assert "pip install 'efface[serve]'" in text
    code, summary = out["demo"]
    assert code == 0, summary
    assert summary["efface_leaked"] == 0 and summary["naive_leaked"] > 0
    assert out["loaded"] == [] and out["service_loaded"] == []


def test_core_dependencies_leave_the_service_stack_to_the_serve_extra():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]

    def names(reqs):
        return {r.split(";")[0].split("[")[0].split("<")[0].split(">")[0].split("=")[0].strip() for r in reqs}

    core = names(project["dependencies"])
    extras = project["optional-dependencies"]
    assert core.isdisjoint({"mcp", "fastapi", "uvicorn", "httptools", "uvloop", "starlette"})
    assert {"mcp", "fastapi", "uvicorn", "httptools", "uvloop"} <= names(extras["serve"])
    assert {"httpx", "pydantic"} <= core  # efface.open(url, api_key=...): the client is the library's
    assert any(r.startswith("efface[") and "serve" in r for r in extras["test"])


def test_ci_runs_the_readme_quick_start_exactly():
    readme = (ROOT / "README.md").read_text().splitlines()
    fence = readme.index("```sh", next(i for i, line in enumerate(readme) if line == "## Quick start"))
    first, second = readme[fence + 1], readme[fence + 2]
    assert first == 'pip install torch==2.13.0 -e ".[serve,minilm]" && efface demo'
    # .ci/run may install system packages first; its last two commands are the README's, exactly
    commands = [line for line in (ROOT / ".ci" / "run").read_text().splitlines() if line and not line.startswith("#")]
    assert commands[-2:] == [first, second]
