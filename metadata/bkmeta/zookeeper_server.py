"""A real ZooKeeper server (Java) run as a child process, for dev clusters and integration tests.

The jars come from ``$ZOOKEEPER_HOME``, Debian's ``/usr/share/zookeeper``, or the jars bundled with
pyspark (``zookeeper-3.9.x.jar`` is there). ``ZooKeeperServerMain`` needs only ZooKeeper, jute,
slf4j, dropwizard metrics-core, commons-io, snappy-java and audience-annotations; log4j is added when
present so the server's warnings reach stderr.
"""

from __future__ import annotations

import glob
import logging
import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from bkproto.errors import MetadataStoreError

log = logging.getLogger(__name__)

MAIN_CLASS = "org.apache.zookeeper.server.ZooKeeperServerMain"

# Jar name prefixes the standalone server needs (the rest of a Spark or Hadoop tree is not loaded:
# a small classpath starts faster and avoids duplicate slf4j bindings).
_REQUIRED_PREFIXES = (
    "zookeeper-",
    "zookeeper-jute-",
    "slf4j-api-",
    "metrics-core-",
    "commons-io-",
    "snappy-java-",  # snapshot streams
)
_OPTIONAL_PREFIXES = ("audience-annotations-", "log4j-api-", "log4j-core-", "log4j-slf4j2-impl-")
# A secure client port needs ZooKeeper's Netty connection factory (pyspark bundles Netty too).
_NETTY_PREFIXES = (
    "netty-buffer-", "netty-codec-", "netty-common-", "netty-handler-", "netty-resolver-",
    "netty-transport-", "netty-transport-native-unix-common-",
)
_NETTY_OPTIONAL_PREFIXES = ("netty-codec-base-", "netty-transport-classes-epoll-")  # Netty 4.2's split


# WARN and above to stderr: quiet when healthy, but a failing server says why.
_LOG4J2_PROPERTIES = """\
rootLogger.level = WARN
rootLogger.appenderRef.stderr.ref = STDERR
appender.stderr.type = Console
appender.stderr.name = STDERR
appender.stderr.target = SYSTEM_ERR
appender.stderr.layout.type = PatternLayout
appender.stderr.layout.pattern = %d{ISO8601} %-5p [%t] %c{1}: %m%n
"""


class ZooKeeperNotFoundError(MetadataStoreError):
    """No ZooKeeper jars (or no java) were found on this machine."""


def _candidate_jar_dirs() -> list[Path]:
    dirs: list[Path] = []
    home = os.environ.get("ZOOKEEPER_HOME")
    if home:
        dirs += [Path(home), Path(home) / "lib"]
    dirs += [Path("/usr/share/zookeeper"), Path("/usr/share/zookeeper/lib"), Path("/usr/share/java")]
    try:
        import pyspark

        dirs.append(Path(pyspark.__file__).parent / "jars")
    except ImportError:
        pass
    return [d for d in dirs if d.is_dir()]


def _pick(jars: list[str], prefix: str) -> str | None:
    # "zookeeper-" must not match "zookeeper-jute-": require a digit right after the prefix.
    names = [(os.path.basename(j), j) for j in jars]
    n0 = len(prefix)
    matches = sorted(j for n, j in names if n.startswith(prefix) and n[n0 : n0 + 1].isdigit())
    return matches[-1] if matches else None


def find_classpath(netty: bool = False) -> list[str]:
    """The jars to run ``ZooKeeperServerMain`` (with ``netty``, those of its Netty connection
    factory too)."""
    all_jars: list[str] = []
    for d in _candidate_jar_dirs():
        all_jars += glob.glob(str(d / "*.jar"))
    if _pick(all_jars, "zookeeper-") is None:
        raise ZooKeeperNotFoundError(
            "no zookeeper-*.jar found: set ZOOKEEPER_HOME, install Debian's zookeeper package, "
            "or pip install pyspark (it bundles the ZooKeeper jars)"
        )
    classpath: list[str] = []
    required = _REQUIRED_PREFIXES + (_NETTY_PREFIXES if netty else ())
    for prefix in required:
        jar = _pick(all_jars, prefix)
        if jar is None:
            raise ZooKeeperNotFoundError(f"ZooKeeper needs a {prefix}*.jar next to zookeeper-*.jar")
        classpath.append(jar)
    for prefix in _OPTIONAL_PREFIXES + (_NETTY_OPTIONAL_PREFIXES if netty else ()):
        jar = _pick(all_jars, prefix)
        if jar is not None:
            classpath.append(jar)
    return classpath


def free_port() -> int:
    """A loopback port that was free a moment ago (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def four_letter_word(host: str, port: int, word: str, timeout: float = 1.0) -> str:
    """Send a ZooKeeper four-letter command (``ruok``, ``srvr``) and return the answer."""
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.sendall(word.encode())
        chunks: list[bytes] = []
        while True:
            data = s.recv(4096)
            if not data:
                break
            chunks.append(data)
    return b"".join(chunks).decode(errors="replace")


@dataclass(frozen=True)
class ZooKeeperConfig:
    data_dir: Path
    port: int = 2181
    host: str = "127.0.0.1"
    tick_time_ms: int = 2000
    heap_mb: int = 128
    # TLS on a second, secure client port (ZooKeeper's secureClientPort, Netty), PEM files:
    # the keystore holds the server's PKCS#8 key and certificate in one file, as ZooKeeper reads it
    secure_port: int | None = None
    tls_keystore: Path | None = None
    tls_truststore: Path | None = None  # CA of client certificates (with tls_client_auth "need")
    tls_client_auth: str = "none"  # ssl.clientAuth: none, want or need

    def zoo_cfg(self) -> str:
        return "\n".join(
            [
                *self._tls_lines(),
                f"tickTime={self.tick_time_ms}",
                f"dataDir={self.data_dir / 'data'}",
                f"clientPort={self.port}",
                f"clientPortAddress={self.host}",
                "admin.enableServer=false",
                "4lw.commands.whitelist=srvr,ruok,stat,mntr,cons",
                "maxClientCnxns=0",
                # Tests expire sessions; keep the lower bound small so short session timeouts are honoured.
                f"minSessionTimeout={self.tick_time_ms}",
                "autopurge.snapRetainCount=3",
                "autopurge.purgeInterval=1",
                "",
            ]
        )


    def _tls_lines(self) -> list[str]:
        if self.secure_port is None:
            return []
        if self.tls_keystore is None:
            raise ValueError("a secure client port needs tls_keystore (PEM key and certificate)")
        lines = [
            f"secureClientPort={self.secure_port}",
            "serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory",
            f"ssl.keyStore.location={self.tls_keystore}",
            "ssl.keyStore.type=PEM",
            f"ssl.clientAuth={self.tls_client_auth}",
        ]
        if self.tls_truststore is not None:
            lines += [f"ssl.trustStore.location={self.tls_truststore}", "ssl.trustStore.type=PEM"]
        return lines


class ZooKeeperServer:
    """One standalone ZooKeeper JVM. ``start()`` returns once it answers ``ruok``; ``stop()`` ends it."""

    def __init__(self, config: ZooKeeperConfig) -> None:
        self.config = config
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def hosts(self) -> str:
        return f"{self.config.host}:{self.config.port}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def command(self) -> list[str]:
        java = shutil.which("java") or (
            os.path.join(os.environ["JAVA_HOME"], "bin", "java") if "JAVA_HOME" in os.environ else None
        )
        if java is None:
            raise ZooKeeperNotFoundError("java not found on PATH (ZooKeeper needs Java 11+)")
        cfg_path = self.config.data_dir / "zoo.cfg"
        return [
            java,
            f"-Xmx{self.config.heap_mb}m",
            "-Xss512k",
            # Serial GC and C1 only: small footprint and fast start on a shared 2-core machine.
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-Dzookeeper.admin.enableServer=false",
            f"-Dlog4j2.configurationFile={self.config.data_dir / 'log4j2.properties'}",
            "-cp",
            os.pathsep.join(find_classpath(netty=self.config.secure_port is not None)),
            MAIN_CLASS,
            str(cfg_path),
        ]

    def start(self, stdout: int | None = None, stderr: int | None = None) -> None:
        """Launch the JVM (output inherited unless redirected)."""
        if self._proc is not None:
            raise RuntimeError("ZooKeeper already started")
        (self.config.data_dir / "data").mkdir(parents=True, exist_ok=True)
        (self.config.data_dir / "zoo.cfg").write_text(self.config.zoo_cfg())
        (self.config.data_dir / "log4j2.properties").write_text(_LOG4J2_PROPERTIES)
        cmd = self.command()
        log.info("starting ZooKeeper on %s (data %s)", self.hosts, self.config.data_dir)
        self._proc = subprocess.Popen(cmd, stdout=stdout, stderr=stderr, stdin=subprocess.DEVNULL)

    def wait_ready(self, timeout_s: float = 30.0) -> None:
        """Block until the server serves requests (or raise if the JVM exited or time ran out).

        ``srvr`` rather than ``ruok``: ``ruok`` answers ``imok`` even when the server failed to start
        its database and refuses every session."""
        deadline = time.monotonic() + timeout_s
        while True:
            if self._proc is not None and self._proc.poll() is not None:
                raise MetadataStoreError(
                    f"ZooKeeper exited with code {self._proc.returncode} while starting on {self.hosts} "
                    "(port already in use? its output says why)"
                )
            try:
                if "Mode:" in four_letter_word(self.config.host, self.config.port, "srvr"):
                    return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise MetadataStoreError(f"ZooKeeper on {self.hosts} not ready after {timeout_s} s")
            time.sleep(0.1)

    def wait(self) -> int:
        """Wait for the JVM to exit and return its exit code."""
        if self._proc is None:
            return 0
        return self._proc.wait()

    def terminate(self) -> None:
        """Send SIGTERM without waiting (safe inside a signal handler, unlike ``stop``)."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()

    def stop(self, timeout_s: float = 10.0) -> None:
        """SIGTERM the JVM, then SIGKILL it if it has not exited within ``timeout_s``."""
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            log.warning("ZooKeeper did not stop on SIGTERM; killing it")
            proc.kill()
            proc.wait()

    def kill(self) -> None:
        """SIGKILL the JVM (fault tests: ZooKeeper crashes)."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()

    def __enter__(self) -> ZooKeeperServer:
        self.start()
        self.wait_ready()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
