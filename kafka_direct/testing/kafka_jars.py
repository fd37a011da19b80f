"""Apache Kafka's jars, resolved by their coordinates into the user's cache, once per version.

The broker that :class:`~kafka_direct.testing.apache_kafka.ApacheKafka` starts is Apache
Kafka's own, from Maven Central: never committed, never a dependency of the package. Where
its jars come from, first match wins:

1. ``KAFKA_HOME``: a Kafka distribution (its ``libs`` folder) or a folder of jars the user
   names, for machines without a network. Used as it is, nothing copied.
2. The cache: ``<cache>/kafka-direct/apache-kafka-<version>/``, complete (a manifest of every
   jar's SHA-256 and size, written last) and closed to other users.
3. The user's Maven (``mvn`` on PATH): ``dependency:copy-dependencies`` of a generated
   project, with strict checksums, honouring the user's ``settings.xml`` (mirrors,
   proxies, credentials) as any Maven build does.
4. PySpark's own Ivy (the resolver behind ``spark.jars.packages``), run from PySpark's jars:
   ``spark.jars.ivySettings``, ``spark.jars.repositories`` and ``spark.jars.ivy`` are read
   from ``spark-defaults.conf`` (``SPARK_CONF_DIR``, else ``SPARK_HOME/conf``) as
   spark-submit reads them; Maven Central and the local Maven repository otherwise.

A download goes into a private folder beside the cache entry and becomes the entry by one
rename once every jar is there and hashed, so a partial download is never used; a lock file
lets one first run resolve while another waits and then uses its result. When no way works,
one :class:`~kafka_direct.errors.ServiceError` names all of them.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from xml.sax.saxutils import quoteattr

from kafka_direct.errors import ConfigurationError, ServiceError
from kafka_direct.redaction import redact_text
from kafka_direct.testing.process import ServiceProcess
from kafka_direct.testing.spark_home import cache_directory, close_cache, closed, pyspark_home

__all__ = ["HOME_ENV", "KAFKA_VERSION", "VERSION_ENV", "artifacts", "kafka_jars"]

logger = logging.getLogger(__name__)

#: The Apache Kafka release the tests and the embedded default run.
KAFKA_VERSION = "4.4.0"
#: Another release (``4.3.1``...); its jars are cached beside the pinned one's.
VERSION_ENV = "KAFKA_DIRECT_KAFKA_VERSION"
#: A Kafka distribution, or a folder of its jars, to use instead of resolving any.
HOME_ENV = "KAFKA_HOME"

#: slf4j's binding to Log4j 2, whose Log4j Kafka itself brings: the broker's log lines then
#: reach its log file (a failed start shows why). Kafka's distributions ship it too.
_LOG_BINDING = "org.apache.logging.log4j:log4j-slf4j-impl:2.25.5"
_MANIFEST = "MANIFEST.sha256"
_CENTRAL = "https://repo1.maven.org/maven2/"
_RESOLVE_TIMEOUT = 900.0


def artifacts(version: str) -> tuple[str, ...]:
    """The coordinates resolved for ``version``: the broker, Kafka's tools, the log binding."""
    return (f"org.apache.kafka:kafka_2.13:{version}", f"org.apache.kafka:kafka-tools:{version}",
            _LOG_BINDING)


def kafka_version() -> str:
    """The release asked for: ``KAFKA_DIRECT_KAFKA_VERSION``, else :data:`KAFKA_VERSION`."""
    version = os.environ.get(VERSION_ENV, "").strip() or KAFKA_VERSION
    parts = version.split(".")
    if not (len(parts) == 3 and all(part.isdigit() for part in parts) and int(parts[0]) >= 4):
        raise ConfigurationError(
            f"{VERSION_ENV} must be an Apache Kafka release of 4.0.0 or later (KRaft), "
            f"such as {KAFKA_VERSION}; got {version!r}")
    return version


def _home_jars(home: str) -> Path:
    """The folder of jars in ``KAFKA_HOME`` (a distribution's ``libs``, or the folder)."""
    root = Path(home).expanduser()
    for folder in (root / "libs", root):
        if any(folder.glob("kafka-server-*.jar")) or any(folder.glob("kafka_2.13-*.jar")):
            return folder
    raise ConfigurationError(
        f"{HOME_ENV}={home} holds no Apache Kafka jars: point it at a Kafka distribution "
        f"(the folder with libs/) or a folder holding kafka_2.13-*.jar and its dependencies, "
        f"or unset it to resolve them from Maven Central")


def _manifest_lines(folder: Path) -> list[str]:
    lines = []
    for jar in sorted(folder.glob("*.jar")):
        digest = hashlib.sha256(jar.read_bytes()).hexdigest()
        lines.append(f"{digest} {jar.stat().st_size} {jar.name}")
    return lines


def _complete(entry: Path, version: str) -> bool:
    """Whether ``entry`` is a whole cache entry of ours: its jars exactly the manifest's.

    The entry, its folder, the manifest and every jar must be the user's, not links and
    closed to others' writes (nobody else may swap them between this check and the JVM's
    reading), the manifest must name the broker's jar, and the jars there must be exactly
    the ones it lists, at their sizes (the JVM loads every jar in the folder). Sizes are
    compared on each use (cheap); the hashes were taken when the entry was made, from jars
    whose repository checksums the resolver had checked.
    """
    try:
        if not (closed(entry.parent, directory=True) and closed(entry, directory=True)
                and closed(entry / _MANIFEST)):
            return False
        listed = {}
        for line in (entry / _MANIFEST).read_text().splitlines():
            _digest, size, name = line.split(" ", 2)
            listed[name] = int(size)
        if f"kafka_2.13-{version}.jar" not in listed:
            return False
        if {jar.name for jar in entry.glob("*.jar")} != set(listed):
            return False
        return all(closed(entry / name) and (entry / name).stat().st_size == size
                   for name, size in listed.items())
    except (OSError, ValueError):
        return False


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _run(argv: list[str], cwd: Path, what: str) -> tuple[bool, str]:
    """Run a resolver, its output shown as progress on stderr; (succeeded, its last lines).

    It dies with this process (the parent-death signal) and is killed past
    :data:`_RESOLVE_TIMEOUT`. Repository addresses with a user and password are redacted in
    what is shown and returned.
    """
    log = cwd / "resolve.log"
    process = ServiceProcess(what, argv, log)
    try:
        process.start()
    except OSError as error:
        return False, f"{what} could not run: {error}"
    shown = 0
    deadline = time.monotonic() + _RESOLVE_TIMEOUT
    try:
        while True:
            running = process.alive()
            lines = log.read_bytes().splitlines()
            for line in lines[shown:len(lines) - (1 if running else 0)]:
                text = redact_text(line.decode(errors="replace").strip())
                if "Downloaded" in text or "downloading" in text or "ERROR" in text:
                    print(f"  {what}: {text[:160]}", file=sys.stderr, flush=True)
            shown = max(shown, len(lines) - (1 if running else 0))
            if not running:
                break
            if time.monotonic() > deadline:
                process.kill()
                return False, f"{what} did not finish within {_RESOLVE_TIMEOUT:.0f} s"
            time.sleep(0.2)
        code = process.process.poll() if process.process is not None else None
    finally:
        if process.alive():
            process.kill()
    tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
    return code == 0, redact_text(tail)


def _pom(version: str) -> str:
    dependencies = "".join(
        f"<dependency><groupId>{group}</groupId><artifactId>{artifact}</artifactId>"
        f"<version>{rev}</version></dependency>"
        for group, artifact, rev in (coordinate.split(":") for coordinate in artifacts(version)))
    return ("<project xmlns=\"http://maven.apache.org/POM/4.0.0\"><modelVersion>4.0.0"
            "</modelVersion><groupId>kafka-direct</groupId><artifactId>apache-kafka-jars"
            f"</artifactId><version>{version}</version><packaging>pom</packaging>"
            f"<dependencies>{dependencies}</dependencies></project>")


def _with_maven(version: str, work: Path, jars: Path) -> tuple[bool, str]:
    mvn = shutil.which("mvn")
    if mvn is None:
        return False, "mvn is not on PATH"
    (work / "pom.xml").write_text(_pom(version))
    # -C: a jar whose repository checksum does not match fails the resolution.
    return _run([mvn, "-B", "-C", "dependency:copy-dependencies", "-DincludeScope=runtime",
                 f"-DoutputDirectory={jars}"], work, "maven")


def spark_defaults() -> dict[str, str]:
    """``spark-defaults.conf`` as spark-submit finds it (``SPARK_CONF_DIR``, ``SPARK_HOME``)."""
    folders = [os.environ.get("SPARK_CONF_DIR", "")]
    home = os.environ.get("SPARK_HOME") or (str(pyspark_home() or ""))
    if home:
        folders.append(str(Path(home) / "conf"))
    for folder in folders:
        path = Path(folder) / "spark-defaults.conf" if folder else None
        if path is not None and path.is_file():
            settings = {}
            for line in path.read_text(errors="replace").splitlines():
                line = line.strip()
                if line and not line.startswith("#"):
                    key, _, value = line.replace("\t", " ").partition(" ")
                    settings[key] = value.strip()
            return settings
    return {}


def _ivy_settings(repositories: list[str]) -> str:
    resolvers = ['<ibiblio name="local-m2" m2compatible="true" usepoms="true" '
                 f'root={quoteattr((Path.home() / ".m2" / "repository").as_uri())}/>']
    resolvers += [f'<ibiblio name="repo-{index}" m2compatible="true" root={quoteattr(url)}/>'
                  for index, url in enumerate(repositories)]
    resolvers.append(f'<ibiblio name="central" m2compatible="true" root="{_CENTRAL}"/>')
    return ('<ivysettings><settings defaultResolver="chain"/><resolvers>'
            f'<chain name="chain" returnFirst="true">{"".join(resolvers)}</chain>'
            '</resolvers></ivysettings>')


def _with_ivy(version: str, work: Path, jars: Path,
              settings: Mapping[str, str]) -> tuple[bool, str]:
    home = os.environ.get("SPARK_HOME") or str(pyspark_home() or "")
    ivy_jar = next(iter(sorted(Path(home, "jars").glob("ivy-*.jar"))), None) if home else None
    java = shutil.which("java")
    if ivy_jar is None or java is None:
        return False, "no PySpark with Ivy's jar (or no java) to resolve with"
    ivy_settings = settings.get("spark.jars.ivySettings")
    if not ivy_settings:
        repositories = [url.strip() for url in settings.get("spark.jars.repositories",
                                                            "").split(",") if url.strip()]
        (work / "ivysettings.xml").write_text(_ivy_settings(repositories))
        ivy_settings = str(work / "ivysettings.xml")
    dependencies = "".join(
        f'<dependency org={quoteattr(group)} name={quoteattr(artifact)} '
        f'rev={quoteattr(rev)} conf="default->default(runtime)"/>'
        for group, artifact, rev in (coordinate.split(":") for coordinate in artifacts(version)))
    (work / "ivy.xml").write_text(
        '<ivy-module version="2.0"><info organisation="kafka-direct" module="apache-kafka"/>'
        f'<configurations><conf name="default"/></configurations>'
        f'<dependencies>{dependencies}</dependencies></ivy-module>')
    cache = settings.get("spark.jars.ivy") or str(Path.home() / ".ivy2.5.2")
    return _run([java, "-cp", str(ivy_jar), "org.apache.ivy.Main", "-settings", ivy_settings,
                 "-cache", str(Path(cache) / "cache"), "-ivy", str(work / "ivy.xml"),
                 "-confs", "default",
                 "-retrieve", f"{jars}/[artifact]-[revision](-[classifier]).[ext]"],
                work, "ivy")


def _sweep(entry: Path) -> None:
    """Remove what earlier resolutions left: killed ones' partial folders, replaced entries.

    Called under the lock, so no resolution of this version is running. A replaced entry
    a running broker may still read from is kept an hour.
    """
    for left in entry.parent.glob(f"{entry.name}.*"):
        with contextlib.suppress(OSError):
            info = left.lstat()
            old = time.time() - info.st_mtime > 3600
            if info.st_uid == os.getuid() and left.is_dir() and not left.is_symlink() and (
                    ".partial-" in left.name or old):
                shutil.rmtree(left, ignore_errors=True)


def _resolve(version: str, entry: Path) -> None:
    """Resolve ``version``'s jars into ``entry`` (made by one rename when complete)."""
    _sweep(entry)
    print(f"kafka-direct: resolving Apache Kafka {version} from Maven Central into {entry} "
          f"(about 60 MB, once per version)", file=sys.stderr, flush=True)
    work = Path(tempfile.mkdtemp(prefix=f"{entry.name}.partial-", dir=entry.parent))
    try:
        jars = work / "jars"
        reasons = []
        for name in ("Maven (mvn)", "PySpark's Ivy"):
            shutil.rmtree(jars, ignore_errors=True)
            jars.mkdir()
            succeeded, tail = (_with_maven(version, work, jars) if name.startswith("Maven")
                               else _with_ivy(version, work, jars, spark_defaults()))
            if succeeded and any(jars.glob(f"kafka_2.13-{version}.jar")):
                break
            reasons.append(f"{name}: {tail.strip() or 'failed'}")
            logger.info("resolving Apache Kafka %s with %s failed", version, name)
        else:
            raise ServiceError(
                f"Apache Kafka {version}'s jars could not be resolved. Three ways to get "
                f"them: (1) Maven: install mvn and let its settings.xml reach Maven Central "
                f"or a mirror of it; (2) PySpark's Ivy: spark.jars.repositories or "
                f"spark.jars.ivySettings in spark-defaults.conf naming a reachable "
                f"repository; (3) offline: set {HOME_ENV} to a Kafka distribution or a "
                f"folder of its jars. Or choose another broker with KAFKA_DIRECT_BROKER or "
                f"KAFKA_DIRECT_BOOTSTRAP. What each resolver said:\n" + "\n".join(reasons),
                service="kafka", log_tail="\n".join(reasons))
        for jar in jars.glob("*.jar"):
            jar.chmod(0o644)
        (jars / _MANIFEST).write_text("\n".join(_manifest_lines(jars)) + "\n")
        (jars / _MANIFEST).chmod(0o644)  # whatever the umask: closed to others' writes
        jars.chmod(0o755)
        if entry.exists() or entry.is_symlink():
            # Set aside, not deleted: a broker started from it may still be loading classes.
            entry.rename(entry.with_name(f"{entry.name}.replaced-{os.getpid()}-"
                                         f"{time.monotonic_ns()}"))
        jars.rename(entry)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def kafka_jars(version: str | None = None) -> Path:
    """The folder of Apache Kafka ``version``'s jars, resolved and cached on first use.

    Args:
        version: A release (default: ``KAFKA_DIRECT_KAFKA_VERSION``, else the pinned one).

    Raises:
        ConfigurationError: ``KAFKA_HOME`` names no Kafka, or the version is not one.
        ServiceError: No resolver could fetch the jars (the message names the three ways).
    """
    home = os.environ.get(HOME_ENV, "").strip()
    if home:
        found = _home_jars(home)
        if version and not any(found.glob(f"kafka_2.13-{version}.jar")):
            logger.warning("%s=%s does not hold Apache Kafka %s; running the release it "
                           "holds", HOME_ENV, home, version)
        return found
    version = version or kafka_version()
    cache = cache_directory()
    if not cache.is_absolute():
        raise ConfigurationError(
            f"the cache directory {cache} is relative: set XDG_CACHE_HOME to an absolute "
            f"path, or {HOME_ENV} to a Kafka distribution")
    entry = cache / f"apache-kafka-{version}"
    if _complete(entry, version):
        return entry
    close_cache(cache)
    if not closed(cache, directory=True):
        raise ConfigurationError(
            f"the cache directory {cache} is not yours, is a link, or others may write to "
            f"it: Kafka's jars are not kept there. Close it (chmod go-w), or set "
            f"XDG_CACHE_HOME to a directory of your own, or {HOME_ENV} to a Kafka "
            f"distribution")
    with _locked(cache / f".apache-kafka-{version}.lock"):
        if not _complete(entry, version):  # another first run may have made it meanwhile
            _resolve(version, entry)
    return entry
