"""RocketMQ's Java client for the interop tests: compiles tests/interop/java/AclClient.java
against an unpacked official RocketMQ 4.9.x binary release and runs it.

The release is named by the environment variable BOLTMQ_ROCKETMQ_HOME (its lib/ holds
rocketmq-client, rocketmq-acl and their dependencies); without it the tests that use
`java_client` skip and say so. A release without netty-all in lib/ takes Debian's netty jars
(/usr/share/java, from libnetty-java, installed here when missing).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import trio

__all__ = ["java_client", "results", "run_java"]

SOURCE = Path(__file__).parent / "java" / "AclClient.java"
#: Debian's libnetty-java: its netty-all.jar is an empty aggregate, so the module jars it names.
DEBIAN_NETTY = tuple(
    Path("/usr/share/java") / f"netty-{module}.jar"
    for module in (
        "common", "buffer", "resolver", "transport", "codec", "handler",
        "transport-native-unix-common", "transport-native-epoll",
    )
)  # fmt: skip
#: Seconds one run of the Java client may take (a JVM start, two clients, a busy machine).
RUN_TIMEOUT = 150


@pytest.fixture(scope="module")
def java_client(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """The command line that runs AclClient (compiled here), up to its arguments."""
    home = os.environ.get("BOLTMQ_ROCKETMQ_HOME")
    if not home:
        pytest.skip(
            "BOLTMQ_ROCKETMQ_HOME is not set: point it at an unpacked RocketMQ 4.9.x binary "
            "release to run the Java client's tests"
        )
    lib = Path(home) / "lib"
    jars = sorted(lib.glob("*.jar"))
    if not any(j.name.startswith("rocketmq-client-") for j in jars) or not any(
        j.name.startswith("rocketmq-acl-") for j in jars
    ):
        pytest.fail(
            f"BOLTMQ_ROCKETMQ_HOME={home}: {lib} has no rocketmq-client or rocketmq-acl jar"
        )
    for tool in ("java", "javac"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} is not on PATH: install a JDK (11 or later) to run this test")
    if not any(j.name.startswith("netty-all") for j in jars):
        jars.extend(_debian_netty())
    classes = tmp_path_factory.mktemp("java-acl")
    classpath = os.pathsep.join(str(j) for j in jars)
    compiled = subprocess.run(
        ["javac", "-nowarn", "-cp", classpath, "-d", str(classes), str(SOURCE)],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
    )
    assert compiled.returncode == 0, f"javac failed:\n{compiled.stderr}"
    return [
        # RocketMQ 4.9.4's client runs on JDK 17 as is: no --add-opens needed.
        "java",
        f"-Drocketmq.client.logRoot={classes / 'logs'}",
        "-cp",
        os.pathsep.join([str(classes), classpath]),
        "AclClient",
    ]


def _debian_netty() -> tuple[Path, ...]:
    if all(jar.exists() for jar in DEBIAN_NETTY):
        return DEBIAN_NETTY
    if shutil.which("apt-get") is None or os.geteuid() != 0:
        pytest.fail(
            "the RocketMQ release has no netty-all jar and libnetty-java is not installed: "
            "apt-get install libnetty-java (as root) and run again"
        )
    for step in (
        ["apt-get", "update", "-qq"],
        ["apt-get", "install", "-y", "-qq", "libnetty-java"],
    ):
        done = subprocess.run(step, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, f"{' '.join(step)} failed: {done.stderr.strip()[-500:]}"
    missing = [str(jar) for jar in DEBIAN_NETTY if not jar.exists()]
    assert not missing, f"libnetty-java is installed but {', '.join(missing)} missing"
    return DEBIAN_NETTY


async def run_java(
    command: list[str], *args: str, properties: dict[str, str] | None = None
) -> list[str]:
    """Runs the Java client to completion and returns its result lines (it ends with DONE).

    ``properties`` are Java system properties (RocketMQ's ``tls.*`` settings, say).
    """
    java, *rest = command
    options = [f"-D{key}={value}" for key, value in (properties or {}).items()]
    with trio.fail_after(RUN_TIMEOUT):
        done = await trio.run_process(
            [java, *options, *rest, *args], capture_stdout=True, capture_stderr=True, check=False
        )
    out = done.stdout.decode(errors="replace")
    # The client's own log lines may follow DONE (its shutdown).
    assert done.returncode == 0 and "DONE" in out.splitlines(), (
        f"the Java client failed (exit {done.returncode}):\n{out}\n"
        f"{done.stderr.decode(errors='replace')[-4000:]}"
    )
    return out.splitlines()


def results(lines: list[str], kind: str) -> list[list[str]]:
    """The ``kind`` lines (SENT, RECEIVED, ...) split into their fields."""
    return [line.split(" ", 2)[1:] for line in lines if line.split(" ", 1)[0] == kind]
