"""Apache RocketMQ's own NameServer and broker (an unpacked official 4.9.x binary release) run
with ``java`` directly on loopback, in a scratch directory; BoltMQ's client drives them."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
from pathlib import Path

from bench.peers.base import Server
from bench.peers.boltmq import CLUSTER, broker_registered
from bench.peers.procs import free_port, port_open

#: Jars a release may lack, and the Debian packages whose jars serve instead.
SUBSTITUTES = {
    "netty-all": "libnetty-java",
    "zstd-jni": "libzstd-jni-java",
    "bcprov": "libbcprov-java",
}
DEBIAN_JARS = Path("/usr/share/java")
#: The release's scripts set these for JDK 8; JDK 9+ refuses the old GC flags, and JDK 17
#: needs the two packages opened for the store's direct buffers.
JVM_FLAGS = [
    "-server", "-XX:+UseG1GC", "-XX:-OmitStackTraceInFastThrow",
    "--add-opens=java.base/java.nio=ALL-UNNAMED",
    "--add-opens=java.base/jdk.internal.ref=ALL-UNNAMED",
]  # fmt: skip


class ReleaseError(ValueError):
    """The directory given is not an unpacked RocketMQ binary release."""


def release_jars(home: Path) -> list[Path]:
    """DIR/lib/*.jar plus Debian's jar for each of SUBSTITUTES the release lacks."""
    lib = home / "lib"
    jars = sorted(lib.glob("*.jar"))
    if not any(jar.name.startswith("rocketmq-broker-") for jar in jars):
        raise ReleaseError(
            f"{home} is not an unpacked RocketMQ binary release (no lib/rocketmq-broker-*.jar); "
            "pass the directory that holds bin/, conf/ and lib/"
        )  # fmt: skip
    for prefix in SUBSTITUTES:
        if not any(jar.name.startswith(prefix) for jar in jars):
            jars.extend(_debian_jars(prefix))
    return jars


def _debian_jars(prefix: str) -> list[Path]:
    # Debian's netty-all.jar holds no classes, only a pom naming the module jars: take
    # every netty module (the versioned names are symlinks to the same files).
    if prefix == "netty-all":
        return sorted(
            jar for jar in DEBIAN_JARS.glob("netty-*.jar")
            if not jar.is_symlink() and jar.name != "netty-all.jar"
        )  # fmt: skip
    return [DEBIAN_JARS / f"{prefix}.jar"]


def missing_debian_packages(home: Path) -> list[str]:
    """The Debian packages whose jars the release needs and that are not installed."""
    names = {jar.name for jar in (home / "lib").glob("*.jar")}
    return [
        package for prefix, package in SUBSTITUTES.items()
        if not any(name.startswith(prefix) for name in names)
        and not (DEBIAN_JARS / f"{prefix}.jar").exists()
    ]  # fmt: skip


def release_version(home: Path) -> str:
    """The version in the broker jar's name."""
    for jar in (home / "lib").glob("rocketmq-broker-*.jar"):
        if match := re.match(r"rocketmq-broker-(.+)\.jar$", jar.name):
            return match.group(1)
    return "unknown"


class RocketMQServer(Server):
    """A NameServer and one broker (1 GiB heap each) in the given flush mode."""

    system = "rocketmq"
    jvm = True

    def __init__(self, home: Path, flush: str) -> None:
        self.row = f"RocketMQ {flush}"
        self.flush = flush
        self.settings = f"flushDiskType={flush}"
        self.home = home
        self.classpath = os.pathsep.join(str(jar) for jar in release_jars(home))
        super().__init__()
        self.namesrv_port = 0

    def _java(self, main: str, conf: Path) -> list[str]:
        java = shutil.which("java")
        if java is None:
            raise ReleaseError("no java on PATH: install a JDK (Debian: openjdk-17-jre-headless)")
        return [
            java, "-Xms1g", "-Xmx1g", *JVM_FLAGS, f"-Duser.home={self.scratch}",
            "-Drocketmq.client.logRoot=" + str(self.scratch / "logs"),
            "-cp", self.classpath, main, "-c", str(conf),
        ]  # fmt: skip

    def start(self) -> None:
        """Start the NameServer, then the broker; wait until the broker is registered."""
        env = {**os.environ, "ROCKETMQ_HOME": str(self.home)}
        self.namesrv_port = free_port()
        namesrv_conf = self.scratch / "namesrv.conf"
        namesrv_conf.write_text(f"listenPort={self.namesrv_port}\n")
        self.group.spawn(
            self._java("org.apache.rocketmq.namesrv.NamesrvStartup", namesrv_conf),
            env=env, cwd=self.scratch,
        )  # fmt: skip
        broker_port = free_port(neighbours=(-2, 1))  # the fast port and the HA port
        store = self.scratch / "store"
        broker_conf = self.scratch / "broker.conf"
        broker_conf.write_text(
            "\n".join([
                f"brokerClusterName={CLUSTER}", "brokerName=broker-a", "brokerId=0",
                "brokerRole=ASYNC_MASTER", f"flushDiskType={self.flush}",
                f"namesrvAddr=127.0.0.1:{self.namesrv_port}", "brokerIP1=127.0.0.1",
                f"listenPort={broker_port}", f"storePathRootDir={store}",
                f"storePathCommitLog={store / 'commitlog'}", "autoCreateTopicEnable=true",
                # The scratch disk may be fuller than the broker's default 75% write limit.
                "diskMaxUsedSpaceRatio=95",
            ]) + "\n"
        )  # fmt: skip
        self.group.spawn(
            self._java("org.apache.rocketmq.broker.BrokerStartup", broker_conf),
            env=env, cwd=self.scratch,
        )  # fmt: skip
        namesrv = self.endpoint()["namesrv"]
        self.group.wait_until(lambda: port_open(self.namesrv_port), "registry port open", 90)
        self.group.wait_until(
            lambda: asyncio.run(broker_registered(namesrv)), "broker registered", 180
        )

    def endpoint(self) -> dict[str, str]:
        """The NameServer's address."""
        return {"namesrv": f"127.0.0.1:{self.namesrv_port}"}

    def version(self) -> str:
        """The release's version (from its broker jar)."""
        return release_version(self.home)
