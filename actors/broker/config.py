"""The broker's configuration under RocketMQ's BrokerConfig / MessageStoreConfig key names.

One flat attrs class, so ``broker.conf`` (a Java properties file) and ``--key value`` flags
map onto it by name (`supervisors.config`); `BrokerConfig.store_config` derives the store's
settings from it.
"""

from __future__ import annotations

import os
from pathlib import Path

import attrs

from actors.acl.addresses import AclConfigError
from protocol.tls import CLIENT_AUTH_MODES, TLS_MODES, one_of
from protocol.transport import format_address
from storage import BrokerRole, FlushDiskType, MessageStoreConfig
from supervisors.config import ConfigError, build_config, config_properties, load_config
from supervisors.metrics_http import MetricsExporterType

__all__ = [
    "DEFAULT_STORE_ROOT",
    "STORE_TYPES",
    "BrokerConfig",
    "ConfigError",
    "load_broker_config",
]

DEFAULT_STORE_ROOT = Path("~/store")
#: The stores a broker can run on (storeType).
STORE_TYPES = ("file", "memory")

_port = attrs.validators.and_(attrs.validators.ge(0), attrs.validators.le(65535))
_positive = attrs.validators.gt(0)


@attrs.define(kw_only=True)
class BrokerConfig:
    """Broker and store settings; each attribute's key is its camelCase name."""

    broker_cluster_name: str = "DefaultCluster"
    broker_name: str = "broker-a"
    broker_id: int = attrs.field(default=0, validator=attrs.validators.ge(0))
    # ';'-separated registry addresses; empty = do not register anywhere.
    namesrv_addr: str = ""
    broker_ip1: str = attrs.field(default="127.0.0.1", metadata={"key": "brokerIP1"})
    listen_port: int = attrs.field(default=10911, validator=_port)
    # 0 = listenPort + 1 (RocketMQ's default).
    ha_listen_port: int = attrs.field(default=0, validator=_port)
    # 0 = off.
    websocket_listen_port: int = attrs.field(default=0, validator=_port)
    # PEM certificate chain and key: the websocket listener then speaks wss:// (TLS).
    websocket_tls_cert_path: str = ""
    websocket_tls_key_path: str = ""
    # TLS (docs/security.md). Listeners (this port, the fast port, the HA port): disabled,
    # permissive (one port, TLS told apart by its first byte) or enforcing. tlsEnable: the
    # broker's own calls (registries, other brokers, a slave's HA link) use TLS, checked
    # against tlsClientTrustCertPath. RocketMQ's tls.server.* / tls.client.* keys work too.
    tls_server_mode: str = attrs.field(
        default="disabled", validator=one_of("tlsServerMode", TLS_MODES)
    )
    tls_server_cert_path: str = ""
    tls_server_key_path: str = ""
    tls_server_trust_cert_path: str = ""
    tls_server_need_client_auth: str = attrs.field(
        default="none", validator=one_of("tlsServerNeedClientAuth", CLIENT_AUTH_MODES)
    )
    tls_enable: bool = False
    tls_client_trust_cert_path: str = ""
    tls_client_cert_path: str = ""
    tls_client_key_path: str = ""
    # Also listen on listenPort - 2 (the "VIP" port older Java producers send to).
    fast_port_enable: bool = True
    bind_address: str = "0.0.0.0"
    store_path_root_dir: str = str(DEFAULT_STORE_ROOT)
    # file: RocketMQ's commit log, consume queues and index under storePathRootDir. memory: the
    # same store kept in memory, with no file at all (tables included): for test suites and
    # notebooks. It cannot survive a restart or be replicated, so it runs as ASYNC_MASTER only.
    store_type: str = attrs.field(default="file", validator=one_of("storeType", STORE_TYPES))
    broker_role: BrokerRole = BrokerRole.ASYNC_MASTER
    flush_disk_type: FlushDiskType = FlushDiskType.ASYNC_FLUSH
    broker_permission: int = 6
    auto_create_topic_enable: bool = True
    auto_create_subscription_group: bool = True
    default_topic_queue_nums: int = attrs.field(default=8, validator=_positive)
    cluster_topic_enable: bool = True
    broker_topic_enable: bool = True
    trace_topic_enable: bool = False
    notify_consumer_ids_changed_enable: bool = True
    # SQL92 subscriptions (filters on message properties); off, they are refused, as in
    # RocketMQ. The bloom-filter bitmap behind enableCalcFilterBitMap is not kept.
    enable_property_filter: bool = False
    max_message_size: int = attrs.field(default=4 * 1024 * 1024, validator=_positive)
    region_id: str = "DefaultRegion"
    trace_on: bool = True
    # Request-reply: a reply is also stored in its reply topic after it is pushed to the
    # requester (handlers/reply.py); off, it is only pushed.
    store_reply_message_enable: bool = True
    register_broker_timeout_mills: int = attrs.field(default=6000, validator=_positive)
    register_name_server_period: int = attrs.field(default=30_000, validator=_positive)
    flush_consumer_offset_interval: int = attrs.field(default=5000, validator=_positive)
    channel_expired_timeout: int = attrs.field(default=120_000, validator=_positive)
    long_polling_enable: bool = True
    short_polling_time_mills: int = attrs.field(default=1000, validator=_positive)
    # Held pulls at once; a pull over the bound is answered PULL_NOT_FOUND at once.
    max_held_pulls: int = attrs.field(default=10_000, validator=_positive)
    slave_read_enable: bool = False
    which_broker_when_consume_slowly: int = 1
    # HA (sheet 7): the master's HA address for a slave ("" = learn it at registration),
    # report / heartbeat interval ms, silence ms after which a link is dropped, bytes per
    # transfer frame, the lag (bytes) over which a SYNC_MASTER answers SLAVE_NOT_AVAILABLE and
    # the ms a SYNC_MASTER send waits for a slave before FLUSH_SLAVE_TIMEOUT.
    ha_master_address: str = ""
    ha_send_heartbeat_interval: int = attrs.field(default=5000, validator=_positive)
    ha_housekeeping_interval: int = attrs.field(default=20_000, validator=_positive)
    ha_transfer_batch_size: int = attrs.field(default=32 * 1024, validator=_positive)
    ha_slave_fallbehind_max: int = attrs.field(default=256 * 1024 * 1024, validator=_positive)
    slave_timeout: int = attrs.field(default=3000, validator=_positive)
    # Orderly consumption: ms a LOCK_BATCH_MQ lock lives without renewal (RocketMQ's
    # rocketmq.broker.rebalance.lockMaxLiveTime).
    rebalance_lock_max_live_time: int = attrs.field(default=60_000, validator=_positive)
    # Transactions: a half message older than transactionTimeOut ms with no commit or rollback
    # is checked back with its producer every transactionCheckInterval ms, at most
    # transactionCheckMax times, then discarded.
    transaction_time_out: int = attrs.field(default=6000, validator=attrs.validators.ge(0))
    transaction_check_interval: int = attrs.field(default=60_000, validator=_positive)
    transaction_check_max: int = attrs.field(default=15, validator=_positive)
    # Delay levels 1..N (sheet 8.5): space-separated durations with unit s, m, h or d.
    message_delay_level: str = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
    # Farthest ahead a __STARTDELIVERTIME send may ask for (RocketMQ 5's timerMaxDelaySec).
    timer_max_delay_sec: int = attrs.field(default=3 * 24 * 3600, validator=_positive)
    server_channel_max_idle_time_seconds: int = 120
    # Prometheus metrics (docs/operations.md): PROM serves RocketMQ 5's names at
    # http://<metricsPromExporterHost>:<metricsPromExporterPort>/metrics; "" host = every address.
    metrics_exporter_type: MetricsExporterType = MetricsExporterType.DISABLE
    metrics_prom_exporter_port: int = attrs.field(default=5557, validator=_port)
    metrics_prom_exporter_host: str = ""
    # ACL 1.0 (docs/security.md): check every request against plainAclFile (""= found as
    # plain_acl_path says); accessKey/secretKey sign the broker's own calls (registration
    # with registries that check ACL).
    acl_enable: bool = False
    plain_acl_file: str = ""
    # RocketMQ's install directory, where its operators keep conf/plain_acl.yml; "" = the
    # ROCKETMQ_HOME environment variable, as RocketMQ reads it.
    rocketmq_home: str = ""
    access_key: str = ""
    secret_key: str = ""
    # The dedup index (actors.broker.services.dedup): a send whose BOLTMQ_DEDUP_KEY property this
    # broker stored for the same topic within the last dedupWindowSeconds is answered with the first
    # message's result and not stored again; at most dedupMaxKeys keys are kept (the oldest go
    # first; about 410 bytes each: 1,000,000 keys take about 400 MiB), 0 turns it off.
    dedup_window_seconds: int = attrs.field(default=3600, validator=_positive)
    dedup_max_keys: int = attrs.field(default=1_000_000, validator=attrs.validators.ge(0))
    # Controller mode (RocketMQ 5's RIP-44, docs/broker.md "Controller mode"): the controllers
    # at controllerAddr (';'-separated remoting addresses) assign the broker id and decide who
    # is master; brokerId and brokerRole here then say only SYNC (SYNC_MASTER or SLAVE) or
    # ASYNC (ASYNC_MASTER) replication. Intervals and timeouts in ms.
    enable_controller_mode: bool = False
    controller_addr: str = ""
    broker_heartbeat_interval: int = attrs.field(default=1000, validator=_positive)
    sync_broker_metadata_period: int = attrs.field(default=5000, validator=_positive)
    check_sync_state_set_period: int = attrs.field(default=5000, validator=_positive)
    sync_controller_metadata_period: int = attrs.field(default=10_000, validator=_positive)
    # A master without a controller's heartbeat answer for half of this stops taking writes.
    controller_heart_beat_timeout_mills: int = attrs.field(default=10_000, validator=_positive)
    # Lower is preferred when the controller elects among equally caught-up replicas.
    broker_election_priority: int = attrs.field(default=2**31 - 1)
    # Replicas of the broker group (master included): the only group size a broker knows at
    # start (allAckInSyncStateSet with minInSyncReplicas above it is refused).
    total_replicas: int = attrs.field(default=1, validator=_positive)
    # "" = <storePathRootDir>/epochFileCheckpoint and <storePathRootDir>/brokerIdentity.
    store_path_epoch_file: str = ""
    store_path_broker_identity: str = ""
    # Store settings (RocketMQ keeps the historical "maped" spelling in the key).
    mapped_file_size_commit_log: int = attrs.field(
        default=1024 * 1024 * 1024, validator=_positive, metadata={"key": "mapedFileSizeCommitLog"}
    )
    mapped_file_size_consume_queue: int = attrs.field(
        default=300_000 * 20, validator=_positive, metadata={"key": "mapedFileSizeConsumeQueue"}
    )
    # MiB of the commit log faulted in ahead of the writer while no message comes (the
    # page cache a burst of sends will write into; 0: only 16 MiB).
    commit_log_idle_prefault_mb: int = attrs.field(default=512, validator=attrs.validators.ge(0))
    flush_interval_commit_log: int = attrs.field(default=500, validator=_positive)
    flush_interval_consume_queue: int = attrs.field(default=1000, validator=_positive)
    sync_flush_timeout: int = attrs.field(default=5000, validator=_positive)
    file_reserved_time: float = 72
    delete_when: str = "04"
    disk_max_used_space_ratio: int = 75
    message_index_enable: bool = True
    max_hash_slot_num: int = 5_000_000
    max_index_num: int = 20_000_000
    check_crc_on_recover: bool = True
    # Controller mode's replica safety (actors.broker.ha.master): a SYNC master's put waits
    # for every member of the SyncStateSet (not just one slave); with fewer members than
    # minInSyncReplicas it is refused at once; a slave not caught up within
    # haMaxTimeSlaveNotCatchup ms drops out of the set.
    all_ack_in_sync_state_set: bool = False
    min_in_sync_replicas: int = attrs.field(default=1, validator=_positive)
    ha_max_time_slave_not_catchup: int = attrs.field(default=15_000, validator=_positive)

    def __attrs_post_init__(self) -> None:
        # So a spec, a broker.conf or a flag refuses it before anything starts.
        self.check_store_type()
        self.check_controller_mode()

    @property
    def broker_addr(self) -> str:
        """``brokerIP1:listenPort``: the address registries hand to clients."""
        return f"{self.broker_ip1}:{self.listen_port}"

    @property
    def websocket_addr(self) -> str | None:
        """``ws://brokerIP1:websocketListenPort/`` (``wss://`` with TLS); None when off."""
        if not self.websocket_listen_port:
            return None
        scheme = "wss" if self.websocket_tls_cert_path else "ws"
        return f"{scheme}://{format_address(self.broker_ip1, self.websocket_listen_port)}/"

    @property
    def ha_addr(self) -> str:
        """``brokerIP1:haListenPort``."""
        return f"{self.broker_ip1}:{self.ha_listen_port or self.listen_port + 1}"

    @property
    def namesrv_list(self) -> list[str]:
        """The registry addresses of ``namesrvAddr``."""
        return [part.strip() for part in self.namesrv_addr.split(";") if part.strip()]

    @property
    def store_root(self) -> Path:
        """``storePathRootDir`` with ``~`` expanded."""
        return Path(self.store_path_root_dir).expanduser()

    @property
    def config_dir(self) -> Path:
        """``<storePathRootDir>/config``: topics.json, consumerOffset.json, ..."""
        return self.store_root / "config"

    @property
    def plain_acl_path(self) -> Path:
        """``plainAclFile``, else the first of `plain_acl_candidates` that exists.

        Raises `AclConfigError` naming every path it looked at when none exists, so a broker
        with ``aclEnable=true`` refuses to start rather than guess.
        """
        if self.plain_acl_file:
            return Path(self.plain_acl_file).expanduser()
        candidates = self.plain_acl_candidates
        for path in candidates:
            if path.exists():
                return path
        looked = ", then ".join(str(path) for path in candidates)
        raise AclConfigError(
            f"plain_acl.yml not found: looked at {looked}; write the ACL accounts in the "
            "first or set plainAclFile (see docs/security.md)"
        )

    @property
    def plain_acl_candidates(self) -> list[Path]:
        """Where plain_acl.yml is looked for without ``plainAclFile``, in order: RocketMQ's
        ``<rocketmqHome or $ROCKETMQ_HOME>/conf/plain_acl.yml``, then the store root's
        ``config/plain_acl.yml``."""
        home = self.rocketmq_home or os.environ.get("ROCKETMQ_HOME", "")
        store_root = self.config_dir / "plain_acl.yml"
        if not home:
            return [store_root]
        return [Path(home).expanduser() / "conf" / "plain_acl.yml", store_root]

    @property
    def in_memory(self) -> bool:
        """Whether the broker keeps no file at all (storeType=memory)."""
        return self.store_type == "memory"

    def check_store_type(self) -> None:
        """Refuse, in one line, what the chosen store cannot do."""
        if self.in_memory and self.broker_role != BrokerRole.ASYNC_MASTER:
            raise ConfigError(
                f"storeType=memory keeps no commit log to replicate or to survive a restart: "
                f"brokerRole must be ASYNC_MASTER, not {self.broker_role}; use storeType=file "
                "for a master with slaves"
            )

    def check_controller_mode(self) -> None:
        """Refuse, in one line naming the key, a controller mode that cannot work."""
        if not self.enable_controller_mode:
            return
        if not self.controller_list:
            raise ConfigError(
                "enableControllerMode=true needs controllerAddr: the controllers' remoting "
                "addresses, ';'-separated (for example 127.0.0.1:9878)"
            )
        if self.in_memory:
            raise ConfigError(
                "enableControllerMode=true needs storeType=file: a broker in memory keeps no "
                "commit log to replicate, no epoch file and no broker id across a restart"
            )
        if self.all_ack_in_sync_state_set and self.min_in_sync_replicas > self.total_replicas:
            raise ConfigError(
                f"minInSyncReplicas={self.min_in_sync_replicas} with allAckInSyncStateSet=true "
                f"exceeds totalReplicas={self.total_replicas} (the brokers of the group): no "
                "put could ever be acknowledged; set totalReplicas to the group's size or "
                "lower minInSyncReplicas"
            )

    @property
    def controller_list(self) -> list[str]:
        """The controller addresses of ``controllerAddr``."""
        return [part.strip() for part in self.controller_addr.split(";") if part.strip()]

    @property
    def epoch_file_path(self) -> Path:
        """``storePathEpochFile``, else ``<storePathRootDir>/epochFileCheckpoint``."""
        if self.store_path_epoch_file:
            return Path(self.store_path_epoch_file).expanduser()
        return self.store_root / "epochFileCheckpoint"

    @property
    def broker_identity_path(self) -> Path:
        """``storePathBrokerIdentity``, else ``<storePathRootDir>/brokerIdentity``."""
        if self.store_path_broker_identity:
            return Path(self.store_path_broker_identity).expanduser()
        return self.store_root / "brokerIdentity"

    @property
    def is_slave(self) -> bool:
        """Whether this broker is a slave (refuses writes)."""
        return self.broker_role == BrokerRole.SLAVE

    def store_config(self) -> MessageStoreConfig:
        """The store's settings derived from these."""
        entries = self.mapped_file_size_consume_queue // 20
        return MessageStoreConfig(
            store_path_root_dir=self.store_root,
            mapped_file_size_commit_log=self.mapped_file_size_commit_log,
            idle_prefault_bytes=self.commit_log_idle_prefault_mb * 1024 * 1024,
            mapped_file_size_consume_queue_entries=max(entries, 1),
            flush_disk_type=self.flush_disk_type,
            broker_role=self.broker_role,
            flush_interval_commit_log_ms=self.flush_interval_commit_log,
            flush_interval_consume_queue_ms=self.flush_interval_consume_queue,
            sync_flush_timeout_ms=self.sync_flush_timeout,
            max_message_size=self.max_message_size,
            file_reserved_time_hours=self.file_reserved_time,
            delete_when=self.delete_when,
            disk_max_used_space_ratio=self.disk_max_used_space_ratio,
            message_index_enable=self.message_index_enable,
            max_hash_slot_num=self.max_hash_slot_num,
            max_index_num=self.max_index_num,
            check_crc_on_recover=self.check_crc_on_recover,
            store_host=(self.broker_ip1, self.listen_port),
            schedule_delays_ms=tuple(parse_delay_levels(self.message_delay_level)),
        )

    def to_properties(self) -> dict[str, str]:
        """Every key with its value as text (GET_BROKER_CONFIG's body; the secret key masked)."""
        properties = config_properties(self)
        if properties.get("secretKey"):
            properties["secretKey"] = "******"
        return properties

    @classmethod
    def from_properties(cls, properties: dict[str, str]) -> BrokerConfig:
        """A config from Java-named keys (unknown keys are logged and ignored)."""
        return build_config(cls, properties)


_UNITS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_delay_levels(text: str) -> list[int]:
    """Milliseconds of each level of a ``messageDelayLevel`` string (``"1s 5s 1m 2h 1d"``)."""
    levels = []
    for item in text.split():
        unit = _UNITS.get(item[-1:])
        try:
            value = int(item[:-1])
        except ValueError:
            value = -1
        if unit is None or value < 0:
            raise ConfigError(
                f"messageDelayLevel: {item!r} is not a whole number followed by s, m, h or d"
            )
        levels.append(value * unit)
    if not levels:
        raise ConfigError("messageDelayLevel names no delay level")
    return levels


def load_broker_config(
    path: str | None = None, overrides: dict[str, object] | None = None
) -> BrokerConfig:
    """``broker.conf`` (when given) plus overrides; raises `ConfigError` on a bad value."""
    return load_config(BrokerConfig, path, overrides)
