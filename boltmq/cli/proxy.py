"""``boltmq proxy``: the RocketMQ 5 gRPC front (MessagingService) in the foreground.

Official 5.x clients (Java, Go, Python, Node...) connect to it; it reaches the brokers through
the registry, keeps nothing durable, and stops cleanly on Ctrl-C or SIGTERM (exit status 0).
It runs on asyncio (grpc.aio), not trio like the servers.

ACL: with aclEnable (in the proxy's config, or in the broker.conf given with ``-bc``) every
call's signature and permissions are checked against plain_acl.yml, found as a broker finds
it; this module builds the accounts from the project's ACL code (``actors.acl``) and hands
them to the proxy, which sees them only through `proxy.acl.AccountBook`.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import attrs

from actors.acl import AccessValidator, AclConfigError, Perm
from actors.acl.accounts import Account, check_permission, retry_topic
from actors.broker.config import BrokerConfig
from boltmq.cli._run import EXIT_USAGE, Runner
from protocol import codecs_status
from proxy.config import KEYS, ConfigError, ProxyConfig, load_config
from supervisors.config import ConfigError as PropertiesError
from supervisors.config import load_config as load_properties

if TYPE_CHECKING:
    from proxy.acl import AccountView, Need

log = logging.getLogger("boltmq.proxy")

HELP = "run the RocketMQ 5 gRPC proxy: official 5.x clients in front of the brokers"
EXAMPLE = """example:
  boltmq proxy -n 127.0.0.1:9876 --grpcServerPort 8081
  boltmq proxy -pc rmq-proxy.json --grpcServerPort 0     # an ephemeral port, printed at start"""

#: How often, at most, the ACL file's modification time is looked at.
ACL_RELOAD_INTERVAL = 0.5
_PERMS = {"PUB": Perm.PUB, "SUB": Perm.SUB, "ANY": Perm.ANY}


def setup(parser: argparse.ArgumentParser) -> Runner:
    """Add the proxy's flags: ``-pc FILE``, ``-n``, ``-bc`` and one ``--key VALUE`` per key."""
    parser.add_argument(
        "-pc", "--proxyConfigPath", metavar="FILE", help="rmq-proxy.json (RocketMQ's key names)"
    )
    parser.add_argument(
        "-bc", "--brokerConfig", metavar="FILE",
        help="a broker.conf whose aclEnable, plainAclFile and rocketmqHome the proxy follows",
    )  # fmt: skip
    parser.add_argument("-n", dest="namesrvAddr", metavar="ADDR", help="registries, a;b")
    for key in KEYS:
        if key != "namesrvAddr":
            parser.add_argument(f"--{key}", dest=key, metavar="VALUE", help=f"set {key}")
    parser.add_argument("--namesrvAddr", dest="namesrvAddr", help=argparse.SUPPRESS)

    def run(args: argparse.Namespace) -> int:
        keyed = {key: getattr(args, key) for key in KEYS if getattr(args, key) is not None}
        try:
            config = load_config(args.proxyConfigPath, keyed=keyed)
            config, accounts = _acl(config, args.brokerConfig)
        except (ConfigError, AclConfigError, PropertiesError, OSError) as exc:
            print(f"{parser.prog}: {exc}", file=sys.stderr)
            return EXIT_USAGE
        return run_proxy(config, accounts)

    return run


def run_proxy(config: ProxyConfig, accounts: PlainAclBook | None = None) -> int:
    """Serve until SIGINT or SIGTERM; the exit code (1 when the proxy could not start)."""

    # Imported here: every other `boltmq` command loads this module, not grpc.
    from proxy.server import ProxyServer

    async def main() -> None:
        task = asyncio.current_task()
        assert task is not None
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, _stop, task, signum)
        async with ProxyServer(config, accounts) as server:
            metrics = (
                f"metrics port {server.metrics_port}" if server.metrics_port else "metrics off"
            )
            acl = f"ACL {accounts.validator.path}" if accounts is not None else "ACL off"
            log.info(
                "proxy ready: gRPC port %d on %s; registries: %s; %s; %s; codecs: %s",
                server.port, config.bind_address, config.namesrv_addr, metrics, acl,
                codecs_status(),
            )  # fmt: skip
            await server.wait_closed()

    try:
        asyncio.run(main())
    except asyncio.CancelledError:
        log.info("stopped")
        return 0
    except OSError as exc:
        log.critical("failed: %s", exc)
        return 1
    except Exception as exc:
        log.critical("failed: %s", exc, exc_info=exc)
        return 1
    return 0


def _stop(task: asyncio.Task[None], signum: int) -> None:
    log.info("received %s; stopping", signal.Signals(signum).name)
    task.cancel()


def _acl(config: ProxyConfig, broker_conf: str | None) -> tuple[ProxyConfig, PlainAclBook | None]:
    broker = load_properties(BrokerConfig, broker_conf, {}) if broker_conf else None
    if not config.acl_enable and not (broker is not None and broker.acl_enable):
        return config, None
    if config.plain_acl_file:
        path = Path(config.plain_acl_file).expanduser()
    else:
        broker = broker or BrokerConfig()
        path = broker.plain_acl_path
    validator = AccessValidator(path)
    validator.load()  # a missing or bad file stops the start, naming the file and the fault
    return attrs.evolve(config, acl_enable=True), PlainAclBook(validator)


class PlainAclBook:
    """plain_acl.yml's accounts for the proxy, reloaded when the file changes."""

    def __init__(self, validator: AccessValidator) -> None:
        self.validator = validator
        self._checked = time.monotonic()

    def globally_white(self, host: str) -> bool:
        """Whether ``host`` matches globalWhiteRemoteAddresses."""
        self._reload()
        return self.validator.table.globally_white(host)

    def account(self, access_key: str) -> AccountView | None:
        """The account of ``access_key``, or None."""
        account = self.validator.table.accounts.get(access_key)
        return None if account is None else _AccountView(account)

    def _reload(self) -> None:
        now = time.monotonic()
        if now - self._checked >= ACL_RELOAD_INTERVAL:
            self._checked = now
            self.validator.reload_if_changed()


class _AccountView:
    def __init__(self, account: Account) -> None:
        self._account = account

    @property
    def secret_key(self) -> str:
        return self._account.secret_key

    def white(self, host: str) -> bool:
        return self._account.white_match(host)

    def permits(self, need: Need) -> bool:
        account = self._account
        if account.admin and not account.resource_perms:
            return True  # an admin with no per-resource perms reaches everything, as in RocketMQ
        resource = retry_topic(need.name) if need.kind == "group" else need.name
        return check_permission(_PERMS[need.perm], account.owned_perm(resource))
