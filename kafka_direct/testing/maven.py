"""Sets of JVM artifacts resolved by their Maven coordinates into the user's cache, once.

Apache Kafka's broker, Kafka Connect, Debezium's connectors, Spark's Kafka connectors and the
PostgreSQL JDBC driver are the test services' and the benchmarks' JVM parts: resolved from
Maven Central (or the user's mirror of it), never committed, never a dependency of the
package. A :class:`JarSet` names them by coordinates; :func:`resolve_jars` returns a folder
holding the set's jars and every runtime dependency, where:

1. The cache: ``<cache>/kafka-direct/<name>/``, complete (a manifest of every jar's SHA-256
   and size, written last) and closed to other users.
2. The user's Maven (``mvn`` on PATH): ``dependency:copy-dependencies`` of a generated
   project, with strict checksums, honouring the user's ``settings.xml`` (mirrors,
   proxies, credentials) as any Maven build does.
3. PySpark's own Ivy (the resolver behind ``spark.jars.packages``), run from PySpark's jars:
   ``spark.jars.ivySettings``, ``spark.jars.repositories`` and ``spark.jars.ivy`` are read
   from ``spark-defaults.conf`` (``SPARK_CONF_DIR``, else ``SPARK_HOME/conf``) as
   spark-submit reads them; Maven Central and the local Maven repository otherwise.

A coordinate may name an archive (``group:artifact:version:tar.gz:plugin``, as Kafka Connect
plugins are published): its jars are unpacked into the folder and the archive dropped.

A download goes into a private folder beside the cache entry and becomes the entry by one
rename once every jar is there and hashed, so a partial download is never used; a lock file
lets one first run resolve while another waits and then uses its result. When no way works,
one :class:`~kafka_direct.errors.ServiceError` names all of them and the set's offline
alternative.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import re
import shutil
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from xml.sax.saxutils import quoteattr

from kafka_direct.errors import ConfigurationError, ServiceError
from kafka_direct.redaction import redact_text
from kafka_direct.runtime.spark_home import cache_directory, close_cache, closed, pyspark_home
from kafka_direct.testing.process import ServiceProcess

__all__ = ["JarSet", "resolve_jars", "spark_defaults"]

logger = logging.getLogger(__name__)

_MANIFEST = "MANIFEST.sha256"
_CENTRAL = "https://repo1.maven.org/maven2/"
_RESOLVE_TIMEOUT = 900.0
_ARCHIVES = ("tar.gz", "tgz", "zip")


@dataclass(frozen=True, slots=True)
class JarSet:
    """Artifacts resolved together into one cache entry.

    Attributes:
        name: The cache entry's name, version included (``apache-kafka-4.4.0``).
        title: What the set is, for progress and errors (``Apache Kafka 4.4.0``).
        coordinates: ``group:artifact:version``, or ``...:type:classifier`` for an archive
            whose jars are unpacked.
        marker: A jar the entry must hold to be whole (``kafka_2.13-4.4.0.jar``).
        size: Roughly how much is downloaded, shown the first time (``about 60 MB``).
        offline: How to do without a repository, named in the error when nothing works.
    """

    name: str
    title: str
    coordinates: tuple[str, ...]
    marker: str
    size: str = ""
    offline: str = ""

    def __post_init__(self) -> None:
        if not self.name or "/" in self.name or self.name.startswith("."):
            raise ConfigurationError(f"a jar set's name must be a plain folder name; got "
                                     f"{self.name!r}")
        if not self.coordinates:
            raise ConfigurationError(f"the jar set {self.name} names no coordinates")
        for coordinate in self.coordinates:
            parts = coordinate.split(":")
            if len(parts) not in (3, 5) or not all(parts):
                raise ConfigurationError(
                    f"{coordinate!r} in the jar set {self.name} is not a Maven coordinate: "
                    f"group:artifact:version, or group:artifact:version:type:classifier")
        if not self.marker.endswith(".jar"):
            raise ConfigurationError(f"the jar set {self.name}'s marker must be a jar's name; "
                                     f"got {self.marker!r}")


def _manifest_lines(folder: Path) -> list[str]:
    lines = []
    for jar in sorted(folder.glob("*.jar")):
        digest = hashlib.sha256(jar.read_bytes()).hexdigest()
        lines.append(f"{digest} {jar.stat().st_size} {jar.name}")
    return lines


def _complete(entry: Path, marker: str) -> bool:
    """Whether ``entry`` is a whole cache entry of ours: its jars exactly the manifest's.

    The entry, its folder, the manifest and every jar must be the user's, not links and
    closed to others' writes (nobody else may swap them between this check and the JVM's
    reading), the manifest must name the ``marker`` jar, and the jars there must be exactly
    the ones it lists, at their sizes (a JVM loads every jar in the folder). Sizes are
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
        if marker not in listed:
            return False
        # Every jar a JVM's class path "folder/*" loads: ".JAR" too.
        if {jar.name for jar in entry.iterdir() if jar.suffix.lower() == ".jar"} != set(listed):
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
    log = cwd / f"{what}.log"
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


def _pom(jars: JarSet) -> str:
    dependencies = []
    for coordinate in jars.coordinates:
        group, artifact, rev, *kind = coordinate.split(":")
        # An archive carries its dependencies: its pom's are not resolved again.
        extra = (f"<type>{kind[0]}</type><classifier>{kind[1]}</classifier><exclusions>"
                 "<exclusion><groupId>*</groupId><artifactId>*</artifactId></exclusion>"
                 "</exclusions>" if kind else "")
        dependencies.append(f"<dependency><groupId>{group}</groupId><artifactId>{artifact}"
                            f"</artifactId><version>{rev}</version>{extra}</dependency>")
    return ("<project xmlns=\"http://maven.apache.org/POM/4.0.0\"><modelVersion>4.0.0"
            "</modelVersion><groupId>kafka-direct</groupId><artifactId>jars"
            "</artifactId><version>1</version><packaging>pom</packaging>"
            f"<dependencies>{''.join(dependencies)}</dependencies></project>")


def _with_maven(jars: JarSet, work: Path, into: Path) -> tuple[bool, str]:
    mvn = shutil.which("mvn")
    if mvn is None:
        return False, "mvn is not on PATH"
    (work / "pom.xml").write_text(_pom(jars))
    # -f: the generated project (the resolver runs in this process's directory);
    # -C: a jar whose repository checksum does not match fails the resolution.
    return _run([mvn, "-B", "-C", "-f", str(work / "pom.xml"), "dependency:copy-dependencies",
                 "-DincludeScope=runtime", f"-DoutputDirectory={into}"], work, "maven")


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
                if line and line[0] not in "#!":
                    # A Java properties file: key and value apart by whitespace, = or :.
                    parts = re.split(r"(\s*[=:]\s*|\s+)", line, maxsplit=1)
                    settings[parts[0]] = parts[2].strip() if len(parts) == 3 else ""
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


def _ivy_dependency(coordinate: str) -> str:
    group, artifact, rev, *kind = coordinate.split(":")
    head = (f'<dependency org={quoteattr(group)} name={quoteattr(artifact)} '
            f'rev={quoteattr(rev)} conf="default->default(runtime)"')
    if not kind:
        return head + "/>"
    # An archive carries its dependencies: its pom's are not resolved again.
    head += ' transitive="false"'
    return (head + f'><artifact name={quoteattr(artifact)} type={quoteattr(kind[0])} '
            f'ext={quoteattr(kind[0])} m:classifier={quoteattr(kind[1])}/></dependency>')


def _with_ivy(jars: JarSet, work: Path, into: Path,
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
    dependencies = "".join(_ivy_dependency(coordinate) for coordinate in jars.coordinates)
    (work / "ivy.xml").write_text(
        '<ivy-module version="2.0" xmlns:m="http://ant.apache.org/ivy/maven">'
        '<info organisation="kafka-direct" module="jars"/>'
        f'<configurations><conf name="default"/></configurations>'
        f'<dependencies>{dependencies}</dependencies></ivy-module>')
    cache = settings.get("spark.jars.ivy") or str(Path.home() / ".ivy2.5.2")
    return _run([java, "-cp", str(ivy_jar), "org.apache.ivy.Main", "-settings", ivy_settings,
                 "-cache", str(Path(cache) / "cache"), "-ivy", str(work / "ivy.xml"),
                 "-confs", "default",
                 "-retrieve", f"{into}/[artifact]-[revision](-[classifier]).[ext]"],
                work, "ivy")


def _unpack(folder: Path) -> None:
    """Replace each archive in ``folder`` by the jars it holds (flat; nothing else kept).

    Only regular files named ``*.jar`` are taken, by their base name: an archive's paths
    cannot reach outside the folder.
    """
    for archive in [path for path in folder.iterdir()
                    if path.name.endswith(tuple(f".{ext}" for ext in _ARCHIVES))]:
        if archive.name.endswith(".zip"):
            import zipfile

            with zipfile.ZipFile(archive) as opened:
                for info in opened.infolist():
                    name = Path(info.filename).name
                    if name.endswith(".jar") and not info.is_dir():
                        (folder / name).write_bytes(opened.read(info))
        else:
            with tarfile.open(archive) as opened:
                for member in opened.getmembers():
                    name = Path(member.name).name
                    stream = opened.extractfile(member) if member.isfile() else None
                    if name.endswith(".jar") and stream is not None:
                        (folder / name).write_bytes(stream.read())
        archive.unlink()


def _sweep(entry: Path) -> None:
    """Remove what earlier resolutions left: killed ones' partial folders, replaced entries.

    Called under the lock, so no resolution of this set is running. A replaced entry a
    running JVM may still read from is kept an hour.
    """
    for left in entry.parent.glob(f"{entry.name}.*"):
        # Only this entry's leftovers: another set's name may start with this one's.
        partial = left.name.startswith(f"{entry.name}.partial-")
        replaced = left.name.startswith(f"{entry.name}.replaced-")
        with contextlib.suppress(OSError):
            info = left.lstat()
            old = time.time() - info.st_mtime > 3600  # since it was set aside
            if info.st_uid == os.getuid() and left.is_dir() and not left.is_symlink() and (
                    partial or (replaced and old)):
                shutil.rmtree(left, ignore_errors=True)


def _resolve(jars: JarSet, entry: Path) -> None:
    """Resolve the set into ``entry`` (made by one rename when complete)."""
    _sweep(entry)
    size = f" ({jars.size}, once)" if jars.size else ""
    print(f"kafka-direct: resolving {jars.title} from Maven Central into {entry}{size}",
          file=sys.stderr, flush=True)
    work = Path(tempfile.mkdtemp(prefix=f"{entry.name}.partial-", dir=entry.parent))
    try:
        folder = work / "jars"
        reasons = []
        for name in ("Maven (mvn)", "PySpark's Ivy"):
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            succeeded, tail = (_with_maven(jars, work, folder) if name.startswith("Maven")
                               else _with_ivy(jars, work, folder, spark_defaults()))
            if succeeded:
                _unpack(folder)
                if (folder / jars.marker).is_file():
                    break
                tail = f"{tail}\n(finished without {jars.marker})"
            reasons.append(f"{name}: {tail.strip() or 'failed'}")
            logger.info("resolving %s with %s failed", jars.title, name)
        else:
            offline = f" (3) offline: {jars.offline}." if jars.offline else ""
            raise ServiceError(
                f"{jars.title}'s jars could not be resolved. The ways to get them: (1) "
                f"Maven: install mvn and let its settings.xml reach Maven Central or a "
                f"mirror of it; (2) PySpark's Ivy: spark.jars.repositories or "
                f"spark.jars.ivySettings in spark-defaults.conf naming a reachable "
                f"repository;{offline} What each resolver said:\n" + "\n".join(reasons),
                service=jars.name, log_tail="\n".join(reasons))
        for jar in folder.glob("*.jar"):
            jar.chmod(0o644)
        (folder / _MANIFEST).write_text("\n".join(_manifest_lines(folder)) + "\n")
        (folder / _MANIFEST).chmod(0o644)  # whatever the umask: closed to others' writes
        folder.chmod(0o755)
        if entry.exists() or entry.is_symlink():
            # Set aside, not deleted: a JVM started from it may still be loading classes.
            aside = entry.with_name(f"{entry.name}.replaced-{os.getpid()}-"
                                    f"{time.monotonic_ns()}")
            entry.rename(aside)
            os.utime(aside)  # its hour to be swept counts from now
        folder.rename(entry)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def resolve_jars(jars: JarSet) -> Path:
    """The folder of the set's jars and their runtime dependencies, resolved on first use.

    Raises:
        ConfigurationError: The cache directory is relative or open to others' writes.
        ServiceError: No resolver could fetch the jars (the message names the ways).
    """
    cache = cache_directory()
    if not cache.is_absolute():
        raise ConfigurationError(
            f"the cache directory {cache} is relative: set XDG_CACHE_HOME to an absolute "
            f"path" + (f", or {jars.offline}" if jars.offline else ""))
    entry = cache / jars.name
    if _complete(entry, jars.marker):
        return entry
    close_cache(cache)
    if not closed(cache, directory=True):
        raise ConfigurationError(
            f"the cache directory {cache} is not yours, is a link, or others may write to "
            f"it: {jars.title}'s jars are not kept there. Close it (chmod go-w), or set "
            f"XDG_CACHE_HOME to a directory of your own"
            + (f", or {jars.offline}" if jars.offline else ""))
    with _locked(cache / f".{jars.name}.lock"):
        if not _complete(entry, jars.marker):  # another first run may have made it meanwhile
            _resolve(jars, entry)
    return entry
