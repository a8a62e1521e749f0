"""The registry's configuration, under RocketMQ's NameServer key names."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import attrs

from protocol.tls import CLIENT_AUTH_MODES, TLS_MODES, one_of
from supervisors.config import ConfigError, build_config, config_properties, property_key
from supervisors.metrics_http import MetricsExporterType

__all__ = ["KEYS", "RUNTIME_KEYS", "ConfigError", "RegistryConfig"]

DEFAULT_HOME = Path("~/boltmq/namesrv")

_port = attrs.validators.and_(attrs.validators.ge(0), attrs.validators.le(65535))
_positive = attrs.validators.gt(0)
_not_negative = attrs.validators.ge(0)


@attrs.define(on_setattr=attrs.setters.validate)
class RegistryConfig:
    """Registry settings; each attribute has a Java-style key (see `KEYS`)."""

    listen_port: int = attrs.field(default=9876, validator=_port)
    bind_address: str = "0.0.0.0"
    websocket_listen_port: int = attrs.field(default=0, validator=_port)  # 0 = off
    # PEM certificate chain and key: the websocket listener then speaks wss:// (TLS).
    websocket_tls_cert_path: str = ""
    websocket_tls_key_path: str = ""
    # TLS on the TCP listener (docs/security.md): disabled, permissive (one port, TLS told
    # apart by its first byte) or enforcing; RocketMQ's tls.server.* keys are accepted too.
    tls_server_mode: str = attrs.field(
        default="disabled", validator=one_of("tlsServerMode", TLS_MODES)
    )
    tls_server_cert_path: str = ""
    tls_server_key_path: str = ""
    tls_server_trust_cert_path: str = ""
    tls_server_need_client_auth: str = attrs.field(
        default="none", validator=one_of("tlsServerNeedClientAuth", CLIENT_AUTH_MODES)
    )
    kv_config_path: str | None = str(DEFAULT_HOME / "kvConfig.json")  # None = memory only
    scan_not_active_broker_interval: int = attrs.field(default=10_000, validator=_positive)  # ms
    broker_expired_millis: int = attrs.field(default=120_000, validator=_positive)
    order_message_enable: bool = False
    server_channel_max_idle_time_seconds: int = attrs.field(default=120, validator=_not_negative)
    # Prometheus metrics (docs/operations.md): PROM serves them at :metricsPromExporterPort
    # /metrics (5558 by default, beside a broker's 5557); "" host = every address.
    metrics_exporter_type: MetricsExporterType = MetricsExporterType.DISABLE
    metrics_prom_exporter_port: int = attrs.field(default=5558, validator=_port)
    metrics_prom_exporter_host: str = ""
    # Serve the controller's codes (docs/controller.md) on this registry's port; its keys
    # (controllerDLegerPeers, ...) may sit in the same file.
    enable_controller_in_namesrv: bool = False
    # ACL 1.0 (docs/security.md): check every request against plainAclFile.
    acl_enable: bool = False
    plain_acl_file: str = str(DEFAULT_HOME / "plain_acl.yml")

    def to_properties(self) -> dict[str, str]:
        """Every key with its value as text (GET_NAMESRV_CONFIG's body)."""
        return config_properties(self)

    def update(self, properties: Mapping[str, str], *, runtime: bool = False) -> list[str]:
        """Apply Java-named keys; with ``runtime`` only keys a running registry can change.

        Returns the keys applied. Raises `ConfigError` (and changes nothing) on a bad key/value.
        """
        for key in properties:
            if key not in KEYS:
                raise ConfigError(f"unknown registry config key {key!r}")
            if runtime and key not in RUNTIME_KEYS:
                raise ConfigError(f"{key} cannot be changed while the registry runs")
        updated = build_config(
            RegistryConfig,
            self.to_properties(),
            source="current config",
            overrides=dict(properties),
            overrides_source="update",
        )
        for key in properties:
            attr = KEYS[key]
            setattr(self, attr, getattr(updated, attr))
        return list(properties)

    @classmethod
    def from_properties(cls, properties: Mapping[str, str]) -> RegistryConfig:
        """A config from Java-named keys (unknown keys are logged and ignored)."""
        return build_config(cls, properties)


#: Java key -> attribute, derived from the fields as properties files spell them.
KEYS = {property_key(field): field.name for field in attrs.fields(RegistryConfig)}

#: Keys UPDATE_NAMESRV_CONFIG may change; the others need a restart.
RUNTIME_KEYS = frozenset(
    {"scanNotActiveBrokerInterval", "brokerExpiredMillis", "orderMessageEnable"}
)
