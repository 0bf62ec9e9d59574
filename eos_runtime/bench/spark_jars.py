"""The jars the Spark Structured Streaming peer adds to pyspark's, fetched and built once.

Spark's Kafka connector (``spark-sql-kafka-0-10_2.13``) is in Maven Central up to
``CONNECTOR_VERSION``, not for pyspark's own 4.3. Its dependency
``spark-token-provider-kafka-0-10_2.13`` is there for no Spark 4 version as a jar:
without it a query fails with ``NoClassDefFoundError:
org/apache/spark/kafka010/KafkaConfigUpdater``. Maven Central does hold that module's
public source (its ``sources`` jar, ``TOKEN_PROVIDER_SOURCE_VERSION``): it is compiled
here with the Scala compiler pyspark ships (``scala-compiler_2.13``), against pyspark's
own jars, so it is built for the Spark that runs it. Everything lands in the cache
beside the Kafka broker's jars (``$EOS_CACHE_DIR``, else ``~/.cache/eos_runtime``);
only the first call downloads and compiles.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import zipfile
from importlib import resources
from pathlib import Path

from ..broker.jars import cache_root, find_java, find_maven
from ..errors import SetupError

__all__ = ["CONNECTOR_VERSION", "TOKEN_PROVIDER_SOURCE_VERSION", "pyspark_jars", "cache_dir",
           "fetch"]

CONNECTOR_VERSION = "4.2.0"
KAFKA_CLIENTS_VERSION = "3.9.2"          # the connector's own (spark-parent 4.2.0)
COMMONS_POOL2_VERSION = "2.13.1"
TOKEN_PROVIDER_SOURCE_VERSION = "4.0.0"  # the only Spark 4 sources jar in Maven Central
TOKEN_PROVIDER_JAR = "spark-token-provider-kafka-0-10-built.jar"


# pyspark loads only when the Spark peer is set up, not with the bench


def pyspark_jars() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent / "jars"


def cache_dir() -> Path:
    import pyspark

    return cache_root() / f"spark-kafka-{CONNECTOR_VERSION}-pyspark-{pyspark.__version__}"


def _complete(d: Path) -> bool:
    return (d / ".eos-complete").is_file()


def fetch() -> list[Path]:
    """The jars to add to pyspark's (``spark.jars``), fetching and building them first if
    the cache does not have them. :class:`SetupError` says what failed."""
    target = cache_dir()
    if not _complete(target):
        java = find_java()
        mvn = find_maven()
        target.parent.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=".fetch-spark-", dir=target.parent))
        try:
            _build(java, mvn, work)
            (work / "jars" / ".eos-complete").write_text(f"connector {CONNECTOR_VERSION}\n")
            if target.exists():
                shutil.rmtree(target)
            (work / "jars").rename(target)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return sorted(p for p in target.glob("*.jar"))


def _run(cmd: list[str], what: str, cwd: Path) -> None:
    proc = subprocess.run(cmd, cwd=cwd, stdin=subprocess.DEVNULL, capture_output=True,
                          text=True)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        raise SetupError(f"{what} failed (exit {proc.returncode}):\n{' '.join(cmd)}\n{tail}")


def _build(java: str, mvn: str, work: Path) -> None:
    pom = work / "pom.xml"
    pom.write_bytes(resources.files(__package__).joinpath("spark-kafka-pom.xml").read_bytes())
    jars = work / "jars"
    _run([mvn, "-q", "-B", "-Dstyle.color=never", "-f", str(pom),
          f"-Dconnector.version={CONNECTOR_VERSION}",
          f"-Dkafka.clients.version={KAFKA_CLIENTS_VERSION}",
          f"-Dcommons.pool2.version={COMMONS_POOL2_VERSION}",
          f"-Dtoken.provider.source.version={TOKEN_PROVIDER_SOURCE_VERSION}",
          "dependency:copy-dependencies", f"-DoutputDirectory={jars}"],
         "fetching Spark's Kafka connector with Maven", work)
    (sources_jar,) = jars.glob("spark-token-provider-*-sources.jar")
    src = work / "src"
    with zipfile.ZipFile(sources_jar) as z:
        z.extractall(src)
    sources_jar.unlink()
    classes = work / "classes"
    classes.mkdir()
    spark = pyspark_jars()
    compiler = [str(j) for name in ("scala-compiler", "scala-library", "scala-reflect")
                for j in spark.glob(f"{name}-2.13*.jar")]
    if len(compiler) != 3:
        raise SetupError(f"pyspark's jars ({spark}) hold no Scala 2.13 compiler")
    classpath = ":".join([str(spark / "*"), *(str(j) for j in jars.glob("*.jar"))])
    _run([java, "-cp", ":".join(compiler), "scala.tools.nsc.Main", "-nowarn",
          "-d", str(classes), "-classpath", classpath,
          *(str(p) for p in sorted(src.rglob("*.scala")))],
         "compiling Spark's Kafka token provider with scalac", work)
    with zipfile.ZipFile(jars / TOKEN_PROVIDER_JAR, "w", zipfile.ZIP_DEFLATED) as out:
        for root in (classes, src):   # classes, then the module's resources (services, errors)
            for path in sorted(root.rglob("*")):
                if path.is_file() and path.suffix != ".scala" and \
                        path.name not in ("MANIFEST.MF",):
                    out.write(path, path.relative_to(root).as_posix())
