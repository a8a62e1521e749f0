"""Routes and cluster info for clients that reached the registry over websocket.

A route names brokers by their TCP addresses, which a browser cannot open. A client that asks
over websocket gets each broker's ``ws://`` (or ``wss://``) address instead, as the broker
announced it in its registration (the ``websocketAddr`` field). A broker address without a
websocket listener is left out of the answer, never handed out as an address that cannot work;
a broker name left with no address loses its queues in that answer too. The TCP answer is
untouched: this module only ever reads the route table.

Websocket answers are built per query rather than cached: websocket clients are few and ask
every 30 s, while the TCP path keeps its cache.
"""

from __future__ import annotations

import logging
from typing import Any

import orjson

from actors.registry.route_table import RouteTable

log = logging.getLogger("boltmq.registry")


class WebsocketRoutes:
    """Translates the route table's answers to websocket addresses."""

    def __init__(self, table: RouteTable) -> None:
        self.table = table
        #: Broker addresses already reported as missing a websocket listener (log once each).
        self._reported: set[str] = set()

    def route_json(self, topic: str) -> bytes | None:
        """The encoded TopicRouteData of ``topic`` with websocket broker addresses.

        None when no broker of the topic is reachable over websocket (or the topic is unknown).
        """
        route = self.table.route(topic)
        if route is None:
            return None
        broker_datas = []
        kept: set[str] = set()
        address_map: dict[str, str] = {}
        for data in route["brokerDatas"]:
            addrs = self._translate(data["brokerAddrs"], address_map, f"topic {topic}")
            if addrs:
                broker_datas.append({**data, "brokerAddrs": addrs})
                kept.add(data["brokerName"])
        if not broker_datas:
            return None
        answer: dict[str, Any] = {
            "brokerDatas": broker_datas,
            "filterServerTable": {
                address_map[addr]: servers
                for addr, servers in route["filterServerTable"].items()
                if addr in address_map
            },
        }
        if "orderTopicConf" in route:
            answer["orderTopicConf"] = route["orderTopicConf"]
        answer["queueDatas"] = [q for q in route["queueDatas"] if q["brokerName"] in kept]
        return orjson.dumps(answer)

    def cluster_info(self) -> dict[str, Any]:
        """The ClusterInfo body with websocket broker addresses; brokers without one left out."""
        info = self.table.cluster_info()
        brokers: dict[str, Any] = {}
        for name, data in info["brokerAddrTable"].items():
            addrs = self._translate(data["brokerAddrs"], {}, "cluster info")
            if addrs:
                brokers[name] = {**data, "brokerAddrs": addrs}
        clusters = {
            cluster: [name for name in names if name in brokers]
            for cluster, names in info["clusterAddrTable"].items()
        }
        return {
            "brokerAddrTable": brokers,
            "clusterAddrTable": {c: names for c, names in clusters.items() if names},
        }

    def _translate(
        self, broker_addrs: dict[str, str], address_map: dict[str, str], context: str
    ) -> dict[str, str]:
        live_table = self.table.broker_live_table
        translated: dict[str, str] = {}
        for broker_id, addr in broker_addrs.items():
            live = live_table.get(addr)
            websocket_addr = None if live is None else live.websocket_addr
            if websocket_addr:
                translated[broker_id] = websocket_addr
                address_map[addr] = websocket_addr
                self._reported.discard(addr)
            elif addr not in self._reported:
                self._reported.add(addr)
                log.warning(
                    "registry: broker %s has no websocket listener; left out of websocket "
                    "answers (%s); give it websocketListenPort to serve websocket clients",
                    addr,
                    context,
                )
        return translated
