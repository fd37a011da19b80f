"""The embedded PostgreSQL is no open door: a password for every connection, no widened dirs."""

import logging
import os
import shutil
import stat
import subprocess
from pathlib import Path

import psycopg2
import pytest
from psycopg2.extensions import make_dsn, parse_dsn

from kafka_direct import ServiceError
from kafka_direct.testing import EmbeddedPostgres
from kafka_direct.testing.postgres import SCRAM_ITERATIONS, _bin_dir

pytestmark = pytest.mark.services  # every test here starts PostgreSQL servers of its own


@pytest.fixture(autouse=True)
def _no_ambient_password(monkeypatch, scratch):
    # A password from the environment or a ~/.pgpass would hide a server that asks for none.
    monkeypatch.delenv("PGPASSWORD", raising=False)
    monkeypatch.setenv("PGPASSFILE", str(scratch / "no-such-passfile"))


def _password(dsn):
    password = parse_dsn(dsn).get("password")
    assert password, "the embedded server's DSN carries no password"
    return password


def _without_password(dsn, **changes):
    params = {key: value for key, value in parse_dsn(dsn).items() if key != "password"}
    params.update(changes)
    return make_dsn(**params)


def _refused(dsn):
    try:
        psycopg2.connect(dsn, connect_timeout=5).close()
    except psycopg2.OperationalError as error:
        return str(error)
    return None


def test_connections_need_the_password():
    with EmbeddedPostgres() as pg:
        _password(pg.dsn)
        with pg.connect() as connection, connection.cursor() as cursor:
            cursor.execute("SELECT current_user")
            assert cursor.fetchone() == ("postgres",)
        connection.close()
        assert _refused(_without_password(pg.dsn)) is not None
        assert _refused(_without_password(pg.dsn, password="wrong")) is not None
        # The unix socket asks for the password too.
        assert _refused(_without_password(pg.dsn, host=str(pg.base_dir))) is not None
        # Passwords are stored as SCRAM verifiers, not in clear or as md5.
        with pg.connect() as connection, connection.cursor() as cursor:
            cursor.execute("SELECT rolpassword FROM pg_authid WHERE rolname = 'postgres'")
            verifier = cursor.fetchone()[0]
            assert verifier.startswith("SCRAM-SHA-256$")
            # Its rounds, which every connecting client runs: few for a random password.
            assert int(verifier.split("$")[1].split(":")[0]) == SCRAM_ITERATIONS
            cursor.execute("SELECT DISTINCT auth_method FROM pg_hba_file_rules")
            assert {row[0] for row in cursor.fetchall()} == {"scram-sha-256"}
        connection.close()


def test_each_service_gets_its_own_random_password():
    first, second = EmbeddedPostgres(), EmbeddedPostgres()
    try:
        first.start()
        second.start()
        assert _password(first.dsn) != _password(second.dsn)
        assert len(_password(first.dsn)) >= 24
    finally:
        first.close()
        second.close()


def test_the_password_is_never_shown(caplog, scratch):
    caplog.set_level(logging.DEBUG)
    with EmbeddedPostgres(data_dir=scratch / "pg") as pg:
        pg.restart()
        password = _password(pg.dsn)
        assert password not in repr(pg)
        assert password not in str(pg)
        assert str(pg.port) in repr(pg)
        # A second server on the same port fails; its error shows no password.
        taken = EmbeddedPostgres(port=pg.port, startup_timeout=10)
        with pytest.raises(ServiceError) as info:
            taken.start()
        taken.close()
        shown = [str(info.value), repr(info.value), info.value.log_tail, repr(taken),
                 str(taken)]
        for secret in (password, _password(taken.dsn)):
            assert not any(secret in text for text in shown)
            assert not any(secret in record.getMessage() for record in caplog.records)
            assert secret not in caplog.text
        for log in pg.base_dir.glob("*.log"):
            assert password not in log.read_text(errors="replace")


def test_the_password_file_is_for_the_owner_only(scratch):
    with EmbeddedPostgres(data_dir=scratch / "pg") as pg:
        files = [path for path in pg.base_dir.rglob("*") if path.is_file()
                 and _password(pg.dsn).encode() in path.read_bytes()]
        assert files, "the password is kept with the data for a restart"
        for path in files:
            assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
        assert stat.S_IMODE(pg.base_dir.stat().st_mode) & 0o077 == 0


def _modes(path):
    return {directory: directory.stat().st_mode for directory in [path, *path.parents]}


def test_no_parent_directory_is_opened_to_others(scratch):
    tree = scratch / "owner-only" / "nested"
    tree.mkdir(parents=True)
    for directory in (scratch, scratch / "owner-only", tree):
        directory.chmod(0o700)
    before = _modes(tree)
    with EmbeddedPostgres(data_dir=tree / "pg") as pg:
        with pg.connect() as connection, connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        connection.close()
    after = _modes(tree)
    for directory, mode in before.items():
        gained = after[directory] & ~mode
        # At most the search bit, so that the server's own user can reach its directory.
        assert gained & ~stat.S_IXOTH == 0, (directory, oct(mode), oct(after[directory]))
    for system in (Path("/"), Path(tree.anchor) / "tmp"):
        if system in before:
            assert after[system] == before[system], system


def test_restart_on_the_same_data_dir_keeps_password_and_data(scratch):
    data_dir = scratch / "state" / "postgres"
    pg = EmbeddedPostgres(data_dir=data_dir).start()
    try:
        password = _password(pg.dsn)
        with pg.connect() as connection, connection.cursor() as cursor:
            cursor.execute("CREATE TABLE kept (n int)")
            cursor.execute("INSERT INTO kept VALUES (7)")
        connection.close()
        pg.restart()
        assert _password(pg.dsn) == password
        with pg.connect() as connection, connection.cursor() as cursor:
            cursor.execute("SELECT n FROM kept")
            assert cursor.fetchone() == (7,)
        connection.close()
    finally:
        pg.close()
    # A new service object on the same directory (a second run of a command) finds it too.
    with EmbeddedPostgres(data_dir=data_dir) as again:
        assert _password(again.dsn) == password
        with again.connect() as connection, connection.cursor() as cursor:
            cursor.execute("SELECT n FROM kept")
            assert cursor.fetchone() == (7,)
        connection.close()
        assert _refused(_without_password(again.dsn)) is not None


def test_a_data_dir_from_before_passwords_is_locked_on_start(scratch):
    data_dir = scratch / "pg"
    with EmbeddedPostgres(data_dir=data_dir) as pg:
        secret = _password(pg.dsn)
    # What an older version left behind: no password kept, trust for every local user.
    for path in data_dir.rglob("*"):
        if path.is_file() and secret.encode() in path.read_bytes():
            path.unlink()
    (pg.data_dir / "pg_hba.conf").write_text("host all all 127.0.0.1/32 trust\n"
                                             "local all all trust\n")
    with EmbeddedPostgres(data_dir=data_dir) as again:
        assert _password(again.dsn) != secret
        with again.connect() as connection, connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        connection.close()
        assert _refused(_without_password(again.dsn)) is not None
        assert _refused(_without_password(again.dsn, host=str(again.base_dir))) is not None


def _as_nobody(argv):
    group = "nogroup" if _has_group("nogroup") else None
    env = {"PGPASSFILE": "/nonexistent", "PGCONNECT_TIMEOUT": "5"}
    return subprocess.run(argv, user="nobody", group=group, extra_groups=[], env=env, cwd="/",
                          capture_output=True, text=True, timeout=60, check=False)


def _has_group(name):
    import grp

    try:
        grp.getgrnam(name)
    except KeyError:
        return False
    return True


@pytest.mark.skipif(os.geteuid() != 0, reason="switching to another OS user needs root")
def test_another_os_user_cannot_get_in():
    psql = str(_bin_dir() / "psql")
    with EmbeddedPostgres() as pg:
        secret = _password(pg.dsn)
        kept = [path for path in pg.base_dir.rglob("*") if path.is_file()
                and secret.encode() in path.read_bytes()]
        assert kept
        for dsn in (_without_password(pg.dsn), _without_password(pg.dsn, password="guess"),
                    _without_password(pg.dsn, host=str(pg.base_dir))):
            done = _as_nobody([psql, "--no-password", dsn, "-c", "SELECT 1"])
            assert done.returncode != 0, (done.stdout, done.stderr)
            assert "command not found" not in done.stderr
        # The same client with the password gets in: the refusals above are about the password.
        done = _as_nobody([psql, "--no-password", pg.dsn, "-Atc", "SELECT 1"])
        assert (done.returncode, done.stdout.strip()) == (0, "1"), done.stderr
        for path in kept:
            done = _as_nobody([shutil.which("cat") or "/bin/cat", str(path)])
            assert done.returncode != 0 and secret not in done.stdout
