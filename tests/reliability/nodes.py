"""Registries and brokers as real OS processes that a test kills, stops and starts again.

Rules of this suite: loopback only, free ports picked per test, stores in ``tmp_path`` with
small files and short intervals (set through broker.conf keys), and a deadline around every
wait (`wait_until`). A node's output goes to ``<dir>/node.log``, so no pipe has to be drained.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import attrs

from protocol import RemotingClient, RemotingCommand
from protocol.bodies import EpochEntryCache, SyncStateSet, TopicRouteData
from protocol.codes import RequestCode, ResponseCode
from protocol.headers import (
    GetMaxOffsetRequestHeader,
    GetReplicaInfoRequestHeader,
    GetReplicaInfoResponseHeader,
    GetRouteInfoRequestHeader,
    decode_header,
    encode_header,
)
from protocol.message import MessageExt, decode_records
from tests.actors.broker.helpers import pull_request
from tests.ports import free_port, free_port_pair
from tests.support import remoting
from tests.support.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]

#: Broker settings every test of the suite starts from: small files, short intervals.
SMALL_BROKER: dict[str, Any] = {
    "bindAddress": "127.0.0.1",
    "fastPortEnable": "false",
    "mapedFileSizeCommitLog": 1 << 20,
    "mapedFileSizeConsumeQueue": 20 * 4096,
    "maxHashSlotNum": 4096,
    "maxIndexNum": 16384,
    "flushIntervalCommitLog": 200,
    "flushIntervalConsumeQueue": 200,
    "flushConsumerOffsetInterval": 500,
    "registerNameServerPeriod": 1000,
}


#: What each kind of node logs once it serves.
READY_LINES = {"broker": "ready on", "registry": "registry ready", "controller": "controller ready"}


class Node:
    """One ``python -m boltmq.cli <kind> -c <dir>/<kind>.conf`` process.

    `start` returns once the node answers on its port; `kill` is a crash (SIGKILL), `stop`
    a clean stop (SIGTERM). The same directory, config and store are used by every start.
    """

    def __init__(
        self,
        kind: str,
        directory: Path,
        settings: dict[str, Any],
        *,
        host: str = "127.0.0.1",
        prefix: tuple[str, ...] = (),
    ) -> None:
        self.kind = kind
        self.directory = directory
        self.settings = dict(settings)
        self.port = int(settings["listenPort"])
        self.host = host
        #: Put before the command line (``ip netns exec NAME`` runs the node in a namespace).
        self.prefix = prefix
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = directory / "node.log"

    @property
    def address(self) -> str:
        """``<host>:<listenPort>`` (host 127.0.0.1 unless the node runs elsewhere)."""
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int:
        """The running process's id."""
        assert self.process is not None, f"{self.kind} {self.address} is not running"
        return self.process.pid

    @property
    def store(self) -> Path:
        """A broker's store root."""
        return Path(self.settings["storePathRootDir"])

    def log_text(self) -> str:
        """Everything the node has logged, over all its runs."""
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    @property
    def conf(self) -> Path:
        """The node's config file (written from ``settings`` at each start but a kept one)."""
        return self.directory / f"{self.kind}.conf"

    def launch(self, keep_conf: bool = False) -> subprocess.Popen[bytes]:
        """Start the process without waiting for it to answer (``keep_conf``: with the
        config file as the last run left it)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        conf = self.conf
        if not keep_conf:
            conf.write_text("".join(f"{k}={v}\n" for k, v in self.settings.items()))
        env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [*self.prefix, sys.executable, "-m", "boltmq.cli", self.kind, "-c", str(conf)],
                cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
            )  # fmt: skip
        return self.process

    async def start(self, timeout: float = 60.0, keep_conf: bool = False) -> None:
        """Start and wait until this run logs that it is ready (a broker logs it once every
        child of its supervisor has started)."""
        seen = len(self.log_text())
        process = self.launch(keep_conf)
        ready = READY_LINES[self.kind]

        def up() -> bool:
            if process.poll() is not None:
                raise AssertionError(
                    f"{self.kind} {self.address} exited with {process.returncode}:\n"
                    + self.log_text()[-3000:]
                )
            return ready in self.log_text()[seen:]

        await wait_until(up, timeout, f"{self.kind} {self.address} ready")

    async def wait_exit(self, timeout: float = 30.0) -> int:
        """Wait for the process to end; its return code."""
        process = self.process
        assert process is not None
        await wait_until(lambda: process.poll() is not None, timeout, f"{self.kind} exit")
        return int(process.returncode)

    async def kill(self) -> None:
        """SIGKILL, as a crash or a power cut of the process would."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            await self.wait_exit()

    async def stop(self) -> None:
        """SIGTERM (a clean stop); SIGKILL when it takes longer than 30 s."""
        process = self.process
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            await self.wait_exit(30)
        except AssertionError:
            process.kill()
            await self.wait_exit(10)

    def rss_kib(self) -> int:
        """The process's resident memory in KiB (VmRSS)."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise AssertionError(f"no VmRSS for pid {self.pid}")


def registry_node(
    root: Path, name: str = "registry", port: int | None = None, bind: str = "127.0.0.1"
) -> Node:
    """A registry under ``root/name``."""
    directory = root / name
    return Node(
        "registry",
        directory,
        {
            "listenPort": port or free_port(),
            "bindAddress": bind,
            "kvConfigPath": directory / "kvConfig.json",
        },
    )


def broker_node(
    root: Path,
    name: str,
    namesrv: str,
    *,
    host: str = "127.0.0.1",
    prefix: tuple[str, ...] = (),
    **settings: Any,
) -> Node:
    """A broker under ``root/name`` on a free port pair (listen, HA) unless given."""
    port = settings.pop("listenPort", None) or free_port_pair()
    merged: dict[str, Any] = {
        **SMALL_BROKER,
        "listenPort": port,
        "haListenPort": port + 1,
        "namesrvAddr": namesrv,
        "storePathRootDir": root / name / "store",
        **settings,
    }
    return Node("broker", root / name, merged, host=host, prefix=prefix)


async def call(client: RemotingClient, address: str, request: RemotingCommand) -> RemotingCommand:
    """One request with the longer deadline a node under fault injection may need."""
    return await remoting.call(client, address, request, 15, deadline=20)


async def max_offset(client: RemotingClient, broker: str, topic: str, queue_id: int) -> int:
    """GET_MAX_OFFSET of one queue (-1 when the broker refuses)."""
    header = GetMaxOffsetRequestHeader(topic=topic, queue_id=queue_id)
    answer = await call(
        client, broker, RemotingCommand.request(RequestCode.GET_MAX_OFFSET, encode_header(header))
    )
    if answer.code != ResponseCode.SUCCESS:
        return -1
    return int((answer.ext_fields or {})["offset"])


async def read_queue(
    client: RemotingClient, broker: str, topic: str, queue_id: int, group: str = "ReadBack"
) -> list[MessageExt]:
    """Every message of one queue from offset 0 up to its max offset, by plain pulls."""
    end = await max_offset(client, broker, topic, queue_id)
    messages: list[MessageExt] = []
    offset = 0
    while offset < end:
        request = pull_request(topic, offset, group=group, queue_id=queue_id, max_msgs=32)
        answer = await call(client, broker, request)
        assert answer.code == ResponseCode.SUCCESS, (queue_id, offset, answer.code, answer.remark)
        got = decode_records(answer.body or b"")
        assert got, (queue_id, offset)
        messages.extend(got)
        offset = int((answer.ext_fields or {})["nextBeginOffset"])
    return messages


# -- controller mode (RocketMQ 5's RIP-44) -------------------------------------------------

#: Controller-mode broker keys every failover test starts from: heartbeats and scans short
#: enough that an election takes seconds, not the defaults' tens of seconds.
SHORT_CONTROLLER_BROKER: dict[str, Any] = {
    "enableControllerMode": "true",
    "brokerHeartbeatInterval": 1000,
    "controllerHeartBeatTimeoutMills": 5000,
    "syncBrokerMetadataPeriod": 1000,
    "checkSyncStateSetPeriod": 1000,
    "syncControllerMetadataPeriod": 2000,
    "haMaxTimeSlaveNotCatchup": 3000,
    "haSendHeartbeatInterval": 1000,
    "slaveTimeout": 3000,
}


def controller_node(
    root: Path,
    name: str = "controller",
    *,
    port: int | None = None,
    peers: str | None = None,
    self_id: str | None = None,
    host: str = "127.0.0.1",
    prefix: tuple[str, ...] = (),
    **settings: Any,
) -> Node:
    """A standalone controller (``boltmq controller -c controller.conf``) under ``root/name``.

    ``peers`` is controllerDLegerPeers (``n0-127.0.0.1:<raft port>;n1-...``) and ``self_id``
    this node's id in it; without them the controller runs alone (no Raft).
    """
    directory = root / name
    merged: dict[str, Any] = {
        "listenPort": port or free_port(),
        "controllerStorePath": directory / "store",
        "scanNotActiveBrokerInterval": 1000,
        **settings,
    }
    if peers is not None:
        merged.update(
            controllerDLegerGroup="BoltMQController",
            controllerDLegerPeers=peers,
            controllerDLegerSelfId=self_id or "n0",
        )
    return Node("controller", directory, merged, host=host, prefix=prefix)


def controller_peers(count: int) -> tuple[str, list[str]]:
    """controllerDLegerPeers for ``count`` controllers on free loopback Raft ports, and their
    ids (n0, n1, ...)."""
    ids = [f"n{n}" for n in range(count)]
    return ";".join(f"{i}-127.0.0.1:{free_port()}" for i in ids), ids


def controller_broker_node(
    root: Path,
    name: str,
    namesrv: str,
    controllers: str,
    *,
    broker_name: str = "broker-a",
    **settings: Any,
) -> Node:
    """A controller-mode broker of group ``broker_name`` (``controllers``: controllerAddr,
    ``;``-separated); the controller, not broker.conf, decides its id and role."""
    return broker_node(
        root,
        name,
        namesrv,
        **{
            **SHORT_CONTROLLER_BROKER,
            "brokerName": broker_name,
            "controllerAddr": controllers,
            "brokerRole": "SYNC_MASTER",
            "flushDiskType": "SYNC_FLUSH",
            **settings,
        },
    )


@attrs.frozen
class ReplicaInfo:
    """A group's master as a controller knows it (CONTROLLER_GET_REPLICA_INFO)."""

    master_broker_id: int | None
    master_address: str | None
    master_epoch: int
    sync_state_set: frozenset[int]
    sync_state_set_epoch: int


async def replica_info(
    client: RemotingClient, controllers: str | list[str], broker_name: str
) -> ReplicaInfo | None:
    """CONTROLLER_GET_REPLICA_INFO from the first controller that answers (None when none
    does: a read any controller may answer from its replica of the state)."""
    addresses = controllers.split(";") if isinstance(controllers, str) else controllers
    header = GetReplicaInfoRequestHeader(broker_name=broker_name)
    for address in addresses:
        request = RemotingCommand.request(
            RequestCode.CONTROLLER_GET_REPLICA_INFO, encode_header(header)
        )
        try:
            answer = await remoting.call(client, address, request, 3, deadline=4)
        except Exception:
            continue  # a dead or cut-off controller: ask the next
        if answer.code != ResponseCode.SUCCESS:
            continue
        fields = decode_header(GetReplicaInfoResponseHeader, answer.ext_fields)
        members = SyncStateSet.from_json(answer.body) if answer.body else SyncStateSet()
        return ReplicaInfo(
            fields.master_broker_id,
            fields.master_address or None,
            fields.master_epoch or 0,
            frozenset(members.sync_state_set),
            members.sync_state_set_epoch,
        )
    return None


async def wait_controller_master(
    client: RemotingClient,
    controllers: str | list[str],
    broker_name: str,
    *,
    not_address: str | None = None,
    above_epoch: int = 0,
    timeout: float = 60.0,
) -> ReplicaInfo:
    """Wait until a controller names a master of ``broker_name`` (other than ``not_address``,
    at an epoch above ``above_epoch``); that answer."""
    seen: list[ReplicaInfo | None] = [None]

    async def named() -> bool:
        info = seen[0] = await replica_info(client, controllers, broker_name)
        return (
            info is not None
            and info.master_address is not None
            and info.master_address != not_address
            and info.master_epoch > above_epoch
        )

    await wait_until(named, timeout, f"a master of {broker_name} named by the controller")
    info = seen[0]
    assert info is not None
    return info


async def route_master(client: RemotingClient, registry: str, topic: str, broker_name: str) -> str:
    """The address the registry's route of ``topic`` gives as ``broker_name``'s master (id
    0); "" when it gives none."""
    header = GetRouteInfoRequestHeader(topic=topic)
    request = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, encode_header(header))
    answer = await call(client, registry, request)
    if answer.code != ResponseCode.SUCCESS or not answer.body:
        return ""
    for data in TopicRouteData.from_json(answer.body).broker_datas:
        if data.broker_name == broker_name:
            return data.broker_addrs.get(0, "")
    return ""


async def epoch_cache(client: RemotingClient, broker: str) -> EpochEntryCache:
    """GET_BROKER_EPOCH_CACHE asked of a broker: its epoch entries and commit-log end."""
    answer = await call(client, broker, RemotingCommand.request(RequestCode.GET_BROKER_EPOCH_CACHE))
    assert answer.code == ResponseCode.SUCCESS, (broker, answer.code, answer.remark)
    return EpochEntryCache.from_json(answer.body or b"{}")


def commit_log_bytes(store: Path, end: int | None = None) -> bytes:
    """A store's commit log as one byte string, up to ``end`` (default: every file whole)."""
    files = sorted(
        (f for f in (store / "commitlog").iterdir() if f.name.isdigit()), key=lambda f: int(f.name)
    )
    data = b"".join(f.read_bytes() for f in files)
    first = int(files[0].name) if files else 0
    assert first == 0, f"{store}: the commit log starts at {first}, not 0"
    return data if end is None else data[:end]
