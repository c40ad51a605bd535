"""Several servers, one truth: two real ``efface serve --origin postgresql://...`` processes on
one PostgreSQL database, driven with the real HTTP client (issue #34 item 4).

* a key created with ``efface keys create --origin`` works on both servers; revoked, both
  refuse it from their next request;
* a write acknowledged by one server is readable, scannable and recallable on the other;
* a forget acknowledged by one server is never served by the other from its next request on:
  read, scan and recall, over many interleaved rounds, each server taking each role;
* ``kill -9`` of a server in the middle of traffic loses nothing it acknowledged and
  resurrects nothing erased (checked on the other server and on the restarted one);
* the URL's password is never printed (server log, CLI output, errors), and never put on a
  command line either (``ps`` shows those to every user of the machine): every process here is
  given the URL in ``EFFACE_ORIGIN``, as docs/postgres.md tells operators to;
* a role that must give a password gets it from libpq's ``PGPASSFILE`` or ``PGPASSWORD``, the
  URL naming no password at all.

Each server is its own process (``python -m efface serve``), on a free loopback port, stopped
by its pid. The embedder is the hashing one (no model to load twice on a shared machine): what
is tested is the servers' agreement, not ranking quality.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import efface
from child_env import child_env
from efface.service.wire import Unauthorized

PASSWORD = "Pw-quillon-7f3a9"
"""In every URL the servers and the CLI are given (the test cluster trusts loopback, so it is
accepted and ignored): it must never be printed. The URL goes to each process in
``EFFACE_ORIGIN``, never as ``--origin URL`` on its command line."""
TENANT = "acme"
PURPOSE = "support"


def _url(pg_db) -> str:
    return pg_db.url.replace("@", f":{PASSWORD}@", 1)


class PgServe:
    """One ``efface serve --origin`` process; its log in a file."""

    def __init__(self, url: str, kek: Path, log: Path, env: dict[str, str] | None = None) -> None:
        self.args = [sys.executable, "-m", "efface", "serve", "--kek-file", str(kek)]
        self.args += ["--embedder", "hashing", "--port", "0"]
        self.log_path = log
        self.env = {**child_env(), **(env or {}), "EFFACE_ORIGIN": url}  # not on the command line
        self.env["XDG_CACHE_HOME"] = str(log.parent / "cache")  # its cache directory: kill -9 leaves it behind
        self.start()

    def start(self) -> None:
        with open(self.log_path, "ab") as log:
            start = log.tell()
            self.proc = subprocess.Popen(self.args, stdout=log, stderr=subprocess.STDOUT, env=self.env)
        deadline = time.monotonic() + 180
        while (m := re.search(r"Uvicorn running on (http://127\.0\.0\.1:\d+)", self.log()[start:])) is None:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                if os.environ.get("CI") != "true" and self.proc.returncode is None:
                    pytest.skip("efface serve --origin did not start in time on this machine")
                pytest.fail("efface serve --origin did not start:\n" + self.log()[-3000:])
            time.sleep(0.1)
        self.url = m.group(1)

    def log(self) -> str:
        return self.log_path.read_bytes().decode("utf-8", "replace")

    def client(self, key: str) -> efface.Client:
        return efface.Client(self.url, api_key=key, timeout=60)

    def kill9(self) -> None:
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


def efface_cli(*args: str, origin: str | None = None, env: dict[str, str] | None = None) -> tuple[int, dict, str]:
    """``efface ARGS --json``; ``origin``: the store's URL, given in ``EFFACE_ORIGIN`` (a URL with
    a password on a command line is visible in ``ps``)."""
    env = {**child_env(), **(env or {})}
    if origin is not None:
        env["EFFACE_ORIGIN"] = origin
    out = subprocess.run(
        [sys.executable, "-m", "efface", *args, "--json"], env=env, capture_output=True, text=True, timeout=180
    )
    return out.returncode, (json.loads(out.stdout) if out.stdout.strip() else {}), out.stdout + out.stderr


@pytest.fixture
def two(pg_db, tmp_path):
    """Server A (which creates the store: schema, secret, KEK file), then server B."""
    url, kek = _url(pg_db), tmp_path / "efface.kek"
    a = PgServe(url, kek, tmp_path / "a.log")
    b = None
    try:
        b = PgServe(url, kek, tmp_path / "b.log")
        yield url, kek, a, b
    finally:
        for s in (a, b):
            if s is not None:
                s.stop()
    for s in (a, b):
        assert s is not None and PASSWORD not in s.log()


def test_keys_created_or_revoked_anywhere_count_on_every_server(two):
    url, kek, a, b = two
    code, made, printed = efface_cli("keys", "create", "--kek-file", str(kek), "--tenant", TENANT, origin=url)
    assert code == 0, printed
    assert PASSWORD not in printed
    key = made["key"]
    with a.client(key) as ca, b.client(key) as cb:
        ca.write("n1", "Alice prefers green tea", subject="alice", purpose=PURPOSE)
        assert cb.read("n1", purpose=PURPOSE).text == "Alice prefers green tea"
        code, listed, _ = efface_cli("keys", "list", "--kek-file", str(kek), "--tenant", TENANT, origin=url)
        assert code == 0 and [k["id"] for k in listed["keys"]] == [made["id"]]
        assert listed["keys"][0]["tenant"] == TENANT
        code, _, printed = efface_cli("keys", "revoke", made["id"], "--kek-file", str(kek), origin=url)
        assert code == 0, printed
        for c in (ca, cb):
            with pytest.raises(Unauthorized):
                c.read("n1", purpose=PURPOSE)
    # the database never holds the tenant's name in clear, nor the key
    import psycopg

    with psycopg.connect(url.replace(f":{PASSWORD}@", "@"), autocommit=True) as conn:
        rows = conn.execute("SELECT * FROM efface.api_keys").fetchall()
        destroyed = conn.execute("SELECT count(*) FROM efface.destroyed_keys").fetchone()
    assert rows == [] and destroyed is not None and destroyed[0] >= 1


def test_a_forget_on_one_server_is_never_served_by_the_other(two):
    url, kek, a, b = two
    from efface.service.pgkeys import PgKeyRing

    with PgKeyRing(url, kek_file=kek) as ring:
        key = ring.create(TENANT)[0]
    with a.client(key) as ca, b.client(key) as cb:
        servers = [ca, cb]
        rounds = 24
        for i in range(rounds):
            w, r = servers[i % 2], servers[(i + 1) % 2]  # each server takes each role
            word = f"zorblax{i:03d}"
            w.write(f"m{i}", f"note {i}: the {word} gadget is blue", subject=f"s{i}", purpose=PURPOSE)
            w.write(f"keep{i}", f"note {i}: a lasting memory about teapots {i}", subject="keeper", purpose=PURPOSE)
            # the write is seen by the other server at once
            assert r.read(f"m{i}", purpose=PURPOSE) is not None
            assert f"m{i}" in [h.key for h in r.recall(f"{word} gadget", purpose=PURPOSE, k=5)]
            assert f"m{i}" in [m.key for m in r.scan(purpose=PURPOSE, prefix="m", limit=1000)]
            # forget on one (alternating which), then the other's very next request
            f = servers[(i // 2) % 2]
            other = cb if f is ca else ca
            receipt = f.forget(subject=f"s{i}") if i % 3 else f.forget(key=f"m{i}")
            assert list(receipt.erased) == [f"m{i}"]
            assert other.read(f"m{i}", purpose=PURPOSE) is None
            assert f"m{i}" not in [h.key for h in other.recall(f"{word} gadget", purpose=PURPOSE, k=5)]
            assert f"m{i}" not in [m.key for m in other.scan(purpose=PURPOSE, limit=1000)]
            # nothing else was lost
            assert other.read(f"keep{i}", purpose=PURPOSE) is not None
        for c in servers:
            left = {m.key for m in c.scan(purpose=PURPOSE, limit=1000)}
            assert left == {f"keep{i}" for i in range(rounds)}


def test_kill_9_of_a_server_loses_nothing_acknowledged_and_resurrects_nothing(two):
    url, kek, a, b = two
    from efface.service.pgkeys import PgKeyRing

    with PgKeyRing(url, kek_file=kek) as ring:
        key = ring.create(TENANT)[0]
    written: list[str] = []  # acknowledged by A
    forgotten: list[str] = []  # acknowledged by A
    in_doubt: list[str] = []  # a forget A died under: committed or not, either is right
    enough = threading.Event()  # A acknowledged six forgets: time to kill it
    killing = threading.Event()  # from here on, an error is A dying under a request
    failures: list[BaseException] = []

    def traffic() -> None:
        i = 0
        with a.client(key) as ca:
            while True:
                try:
                    ca.write(f"k{i}", f"kill test record {i} quillon{i}", subject=f"p{i}", purpose=PURPOSE)
                    written.append(f"k{i}")
                    if i % 2:
                        in_doubt.append(f"k{i - 1}")
                        ca.forget(subject=f"p{i - 1}")
                        forgotten.append(f"k{i - 1}")
                        in_doubt.pop()
                        if len(forgotten) >= 6:
                            enough.set()
                except BaseException as e:
                    if not killing.is_set():  # before the kill: a real failure, reported below
                        failures.append(e)
                    enough.set()
                    return  # else the server died under this request: unacknowledged, either way
                i += 1

    t = threading.Thread(target=traffic)
    t.start()
    try:
        # No while-sleeping: the traffic itself says when six forgets are acknowledged (or
        # that it failed); the timeout only bounds a hung server.
        assert enough.wait(300), "the server acknowledged fewer than six forgets in 300 s"
    finally:
        killing.set()
        a.kill9()
        t.join(timeout=120)
    assert not t.is_alive()
    assert not failures, f"a request failed before the kill: {failures[0]!r}"
    assert len(forgotten) >= 6
    kept = [k for k in written if k not in forgotten and k not in in_doubt]
    a.start()  # restarted on the same database, the same KEK file
    with a.client(key) as ca, b.client(key) as cb:
        for c in (ca, cb):
            for k in kept:
                assert c.read(k, purpose=PURPOSE) is not None, k
            for k in forgotten:
                assert c.read(k, purpose=PURPOSE) is None, k
            scanned = {m.key for m in c.scan(purpose=PURPOSE, limit=1000)}
            assert set(kept) <= scanned and not scanned & set(forgotten)
            for k in forgotten:
                n = k[1:]
                assert k not in [h.key for h in c.recall(f"quillon{n}", purpose=PURPOSE, k=5)]


def test_the_kek_file_missing_or_wrong_is_a_clear_error_never_a_new_key(two, tmp_path):
    url, _kek, _a, _b = two
    missing = tmp_path / "nowhere.kek"
    code, doc, printed = efface_cli("keys", "list", "--kek-file", str(missing), origin=url)
    assert code == 1 and doc["error"]["type"] == "KeyFileMissing", printed
    assert not missing.exists() and PASSWORD not in printed
    from efface.origin.postgres.keys import KekFile

    other = tmp_path / "other.kek"
    assert KekFile(other).create(os.urandom(32))  # another store's file
    code, doc, printed = efface_cli("keys", "list", "--kek-file", str(other), origin=url)
    assert code == 1 and doc["error"]["type"] == "KeyFileMismatch", printed
    code, doc, printed = efface_cli("receipts", "--kek-file", str(other), "--embedder", "hashing", origin=url)
    assert code == 1 and doc["error"]["type"] == "KeyFileMismatch", printed
    # a server given no file at all refuses too, before serving
    proc = subprocess.run(
        [sys.executable, "-m", "efface", "serve", "--embedder", "hashing", "--port", "0"],
        env={**child_env(), "EFFACE_ORIGIN": url},
        capture_output=True,
        text=True,
        timeout=180,
        cwd=tmp_path,
    )
    assert proc.returncode == 1 and PASSWORD not in proc.stdout + proc.stderr
    assert "--kek-file" in proc.stderr and "Traceback" not in proc.stderr


def test_cli_commands_take_origin_and_never_print_the_password(two, tmp_path):
    url, kek, _a, _b = two
    common = ("--kek-file", str(kek), "--embedder", "hashing", "--tenant", TENANT)
    code, doc, printed = efface_cli(
        "write", "c1", "Bob likes chess", "--subject", "bob", "--purpose", PURPOSE, *common, origin=url
    )
    assert code == 0, printed
    code, doc, printed = efface_cli("forget", "--subject", "bob", *common, origin=url)
    assert code == 0 and doc["erased"] == ["c1"], printed
    code, doc, printed = efface_cli("status", doc["handle"], *common, origin=url)
    assert code == 0 and doc["erased"] is True and doc["counts"]["erased"] == 1, printed
    code, doc, printed = efface_cli("--store", str(tmp_path / "s"), "receipts", origin=url)
    assert code == 2 and "not both" in doc["error"]["message"]
    # --origin on the command line still works (a URL without a password: nothing to hide)
    code, doc, printed = efface_cli("receipts", "--origin", url.replace(f":{PASSWORD}@", "@"), *common)
    assert code == 0, printed
    # a wrong port: a clear error, no password
    bad = re.sub(r":(\d+)/", ":1/", url)
    code, doc, printed = efface_cli("receipts", "--kek-file", str(kek), origin=bad)
    assert code == 1 and doc["error"]["type"] == "OriginUnreachable"
    assert PASSWORD not in printed


@pytest.fixture
def pw_role(pg_db):
    """A role that must give its password: two lines of its own at the top of the test
    server's ``pg_hba.conf`` (scram-sha-256; the cluster trusts every other role on loopback),
    removed at teardown. No superuser: it owns the schema efface makes (docs/postgres.md,
    "Roles"). Yields (the URL naming the role and no password, the password)."""
    import psycopg
    from psycopg import sql

    role, password = f"pw_{pg_db.name}", secrets.token_urlsafe(18)
    hba = pg_db.server.datadir / "pg_hba.conf"
    original = hba.read_text()
    with pg_db.connect() as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN NOSUPERUSER PASSWORD {}").format(sql.Identifier(role), password))
        conn.execute(sql.SQL("CREATE SCHEMA efface AUTHORIZATION {}").format(sql.Identifier(role)))
    hba.write_text(f"host all {role} 127.0.0.1/32 scram-sha-256\nhost all {role} ::1/128 scram-sha-256\n" + original)
    url = pg_db.url.replace(f"//{pg_db.url.split('//', 1)[1].split('@', 1)[0]}@", f"//{role}@", 1)
    try:
        with pg_db.connect() as conn:
            conn.execute("SELECT pg_reload_conf()")
        # the reload is the postmaster's to do: ready once the role is asked for its password
        deadline = time.monotonic() + 30
        while True:
            try:
                psycopg.connect(url, connect_timeout=5).close()
            except psycopg.OperationalError as e:
                if "password" in str(e):
                    break
                raise
            assert time.monotonic() < deadline, "the server did not reload pg_hba.conf"
            time.sleep(0.05)
        yield url, password
    finally:
        hba.write_text(original)
        with pg_db.connect() as conn:
            conn.execute("SELECT pg_reload_conf()")
            conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", (role,))
            conn.execute("DROP SCHEMA IF EXISTS efface CASCADE")
            conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def test_a_password_comes_from_pgpassfile_or_pgpassword_never_a_command_line(pw_role, tmp_path):
    """docs/postgres.md, "The password": a role that needs one gets it from libpq's
    ``PGPASSFILE`` (the server here) or ``PGPASSWORD`` (the CLI), the URL in ``EFFACE_ORIGIN``
    naming none; without any, a clear ``OriginUnreachable`` before anything is created."""
    url, password = pw_role
    kek = tmp_path / "efface.kek"
    code, doc, printed = efface_cli("receipts", "--kek-file", str(kek), "--embedder", "hashing", origin=url)
    assert code == 1 and doc["error"]["type"] == "OriginUnreachable", printed
    assert not kek.exists() and "Traceback" not in printed
    host, port, dbname = re.search(r"@([^:/]+):(\d+)/(\w+)", url).groups()  # type: ignore[union-attr]
    passfile = tmp_path / "pgpass"
    passfile.write_text(f"{host}:{port}:{dbname}:{url.split('//')[1].split('@')[0]}:{password}\n")
    passfile.chmod(0o600)  # libpq ignores a password file others may read
    server = PgServe(url, kek, tmp_path / "serve.log", env={"PGPASSFILE": str(passfile)})
    try:
        with open(f"/proc/{server.proc.pid}/cmdline", "rb") as f:
            cmdline = f.read().decode()
        assert "postgresql://" not in cmdline and password not in cmdline  # what ps shows
        code, made, printed = efface_cli(
            "keys", "create", "--kek-file", str(kek), "--tenant", TENANT, origin=url, env={"PGPASSWORD": password}
        )
        assert code == 0, printed
        assert password not in printed
        with server.client(made["key"]) as c:
            c.write("pw1", "Alice keeps her passwords in a vault", subject="alice", purpose=PURPOSE)
            assert c.read("pw1", purpose=PURPOSE).text == "Alice keeps her passwords in a vault"
        code, doc, printed = efface_cli(
            "receipts", "--kek-file", str(kek), "--tenant", TENANT, origin=url, env={"PGPASSWORD": password}
        )
        assert code == 0, printed
    finally:
        server.stop()
    assert password not in server.log()


def _doc_block() -> list[str]:
    """The ```sh block of docs/postgres.md's "Several servers" that says this test runs it."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "postgres.md").read_text("utf-8")
    m = re.search(r"<!-- tested: tests/postgres/test_serve.py[^>]*-->\s*```sh\n(.*?)```", doc, re.S)
    assert m is not None, "docs/postgres.md lost its tested block of commands"
    return [line.split("#", 1)[0].strip() for line in m.group(1).splitlines() if line.strip()]


def test_the_commands_of_docs_postgres_md_several_servers(pg_db, tmp_path):
    """Each line of the doc's block, run as written, with the doc's URL and key file swapped for
    this test's database and a file of its own (through the same variables), and any free port."""
    lines = _doc_block()
    exports = [ln for ln in lines if ln.startswith("export ")]
    assert [e.split("=")[0] for e in exports] == ["export EFFACE_ORIGIN", "export EFFACE_KEK_FILE"]
    url, kek = _url(pg_db), tmp_path / "efface.kek"
    env = {**child_env(), "EFFACE_ORIGIN": url, "EFFACE_KEK_FILE": str(kek)}
    servers: list[PgServe] = []
    try:
        made: dict = {}
        for n, line in enumerate(ln for ln in lines if not ln.startswith("export ")):
            args = line.split()
            assert args[0] == "efface", line
            if line.endswith("&"):
                assert args[1] == "serve"
                s = PgServe.__new__(PgServe)
                s.args = [sys.executable, "-m", "efface", *args[1:-1], "--embedder", "hashing"]
                s.args[s.args.index("--port") + 1] = "0"
                s.log_path, s.env = tmp_path / f"serve{n}.log", env
                servers.append(s)
                s.start()
                continue
            out = subprocess.run(
                [sys.executable, "-m", "efface", *args[1:], "--json"],
                env=env,
                capture_output=True,
                text=True,
                timeout=180,
            )
            assert out.returncode == 0, out.stdout + out.stderr
            assert PASSWORD not in out.stdout + out.stderr
            doc = json.loads(out.stdout)
            if args[1:3] == ["keys", "create"]:
                made = doc
        assert len(servers) == 2 and made.get("key", "").startswith("efk_")
        with servers[0].client(made["key"]) as ca, servers[1].client(made["key"]) as cb:
            ca.write("d1", "Alice prefers green tea", subject="alice", purpose=PURPOSE)
            assert cb.read("d1", purpose=PURPOSE) is not None
            cb.forget(subject="alice")
            assert ca.read("d1", purpose=PURPOSE) is None
    finally:
        for s in servers:
            s.stop()
    for s in servers:
        assert PASSWORD not in s.log() and "***" in s.log()


@pytest.mark.parametrize(
    "url",
    [
        f"postgresql://u:{PASSWORD}@[bad/db",
        f"postgresql://u:{PASSWORD}@127.0.0.1/db?nonsense=1",
    ],
)
@pytest.mark.parametrize("command", [("receipts", "--embedder", "hashing"), ("keys", "list"), ("serve",)])
def test_a_malformed_url_is_bad_input_and_never_printed(url, command, tmp_path):
    kek = tmp_path / "efface.kek"
    out = subprocess.run(
        [sys.executable, "-m", "efface", *command, "--kek-file", str(kek)],
        env={**child_env(), "EFFACE_ORIGIN": url},
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert out.returncode == 2 and "the PostgreSQL URL is malformed" in out.stderr
    assert PASSWORD not in out.stdout + out.stderr and "Traceback" not in out.stderr
    assert not kek.exists()  # nothing was created
