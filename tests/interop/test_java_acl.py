"""RocketMQ's Java client with its ACL hook (AclClientRPCHook) against a broker with ACL on.

The client comes from an unpacked official 4.9.x binary release named by the environment
variable BOLTMQ_ROCKETMQ_HOME (its lib/ holds rocketmq-client, rocketmq-acl and their
dependencies); without it these tests skip and say so. A release without netty-all in lib/
takes Debian's netty jars (/usr/share/java, from libnetty-java, installed here when missing).
tests/interop/java/AclClient.java is compiled with javac into a temporary directory and run
with java; it prints one result per line. Loopback only, ephemeral ports, a deadline on every
wait.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest
import trio

import boltmq
from actors.acl import AccessValidator
from protocol import ResponseCode

pytestmark = pytest.mark.timeout(300)

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

ACL = """
accounts:
  - accessKey: javaclient
    secretKey: java-secret-key
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms:
      - {topic}=PUB|SUB
    groupPerms:
      - {group}=SUB
"""


@pytest.fixture(scope="module")
def java_client(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """The command line that runs AclClient (compiled here), up to its arguments."""
    home = os.environ.get("BOLTMQ_ROCKETMQ_HOME")
    if not home:
        pytest.skip(
            "BOLTMQ_ROCKETMQ_HOME is not set: point it at an unpacked RocketMQ 4.9.x binary "
            "release to run the Java client's ACL test"
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


async def run_java(command: list[str], *args: str) -> list[str]:
    """Runs the Java client to completion and returns its result lines (it ends with DONE)."""
    with trio.fail_after(RUN_TIMEOUT):
        done = await trio.run_process(
            [*command, *args], capture_stdout=True, capture_stderr=True, check=False
        )
    out = done.stdout.decode(errors="replace")
    assert done.returncode == 0 and out.rstrip().endswith("DONE"), (
        f"the Java client failed (exit {done.returncode}):\n{out}\n"
        f"{done.stderr.decode(errors='replace')[-4000:]}"
    )
    return out.splitlines()


def results(lines: list[str], kind: str) -> list[list[str]]:
    """The ``kind`` lines (SENT, RECEIVED, ...) split into their fields."""
    return [line.split(" ", 2)[1:] for line in lines if line.split(" ", 1)[0] == kind]


async def test_java_client_with_acl_hook(
    tmp_path: Path, java_client: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    suffix = uuid.uuid4().hex[:8]
    topic, group = f"JavaAclTopic_{suffix}", f"JavaAclGroup_{suffix}"
    acl_file = tmp_path / "plain_acl.yml"
    acl_file.write_text(ACL.format(topic=topic, group=group))
    async with boltmq.embedded(
        tmp_path / "data", acl_enable=True, plain_acl_file=str(acl_file)
    ) as cluster:
        namesrv = cluster.registry_address
        validator = cluster.broker.acl
        assert isinstance(validator, AccessValidator)

        # Signed: ten messages go in and come back out with their bodies.
        count = 10
        lines = await run_java(
            java_client, "produce-consume", namesrv, topic, group, str(count),
            "javaclient", "java-secret-key",
        )  # fmt: skip
        sent = results(lines, "SENT")
        assert [status for status, _ in sent] == ["SEND_OK"] * count, lines
        received = results(lines, "RECEIVED")
        bodies = sorted(fields[1].split(" ", 1)[1] for fields in received)
        assert bodies == sorted(f"java signed {i}" for i in range(count)), lines
        assert validator.statistics().refused == 0

        # Unsigned: the producer's send and the consumer's pull are refused.
        lines = await run_java(java_client, "refused", namesrv, topic, group)
        assert_refused(lines, "No accessKey is configured")
        assert "No accessKey is configured" in caplog.text
        refused_unsigned = validator.statistics().refused
        assert refused_unsigned >= 2

        # A wrong secret: the signature does not check.
        lines = await run_java(
            java_client, "refused", namesrv, topic, group, "javaclient", "wrong-secret-key"
        )
        assert_refused(lines, "Check signature failed for accessKey=javaclient")
        assert validator.statistics().refused >= refused_unsigned + 2
        assert "Check signature failed for accessKey=javaclient" in caplog.text


def assert_refused(lines: list[str], reason: str) -> None:
    """Both the send and the pull were answered NO_PERMISSION with ``reason`` in the remark."""
    for kind in ("SEND_REFUSED", "PULL_REFUSED"):
        found = results(lines, kind)
        assert len(found) == 1, f"no {kind} line in the Java client's output:\n" + "\n".join(lines)
        code, remark = found[0]
        assert int(code) == ResponseCode.NO_PERMISSION, remark
        assert reason in remark, remark
