"""The broker's one request-code table: every code the broker serves and the handler serving it.

Plain functions are answered inline by the connection's reader (queries, and changes that need
no waiting); ``async`` handlers run in a task of their own (a pull that may be held, calls
relayed to a consumer). Each handler is built here from exactly the parts it uses, taken from
`HandlerParts`, which the composition root (`actors.broker.broker`) fills in: sends in send.py,
request-reply's replies in reply.py, pulls in pull.py, RocketMQ 5's pop codes in pop.py,
retries in send_back.py, orderly locks in locks.py, the clients' other requests in client.py,
the operator's in config_admin.py
(settings, topics, groups), consumer_admin.py (connections, offsets, progress, relayed calls)
and stats.py, what a slave's config sync reads in replication.py; END_TRANSACTION is the
transaction service's (`actors.broker.services.transaction`), whose counters and op puts it
shares.
"""

from __future__ import annotations

from pathlib import Path

import attrs

from actors.broker.config import BrokerConfig
from actors.broker.ha import HighAvailability
from actors.broker.ha.controller_mode import ControllerLink
from actors.broker.handlers.client import ClientParts, ClientRequests
from actors.broker.handlers.config_admin import ConfigAdmin, ConfigAdminParts
from actors.broker.handlers.consumer_admin import ConsumerAdmin, ConsumerAdminParts
from actors.broker.handlers.controller import ControllerRequests
from actors.broker.handlers.locks import LockHandlers
from actors.broker.handlers.pop import PopHandlers, PopParts
from actors.broker.handlers.pull import PullHandler, PullParts
from actors.broker.handlers.replication import ReplicationQueries
from actors.broker.handlers.reply import ReplyHandler, ReplyParts
from actors.broker.handlers.send import ControlledSendHandler, SendHandler, SendParts
from actors.broker.handlers.send_back import SendBackHandler, SendBackParts
from actors.broker.handlers.stats import StatsHandlers, StatsParts
from actors.broker.services.dedup import DedupIndex
from actors.broker.services.pop import PopService
from actors.broker.services.pull_hold import PullHoldService
from actors.broker.services.request_stats import RequestStats
from actors.broker.services.schedule import ScheduleMessageService
from actors.broker.services.stats import BrokerStatsManager
from actors.broker.services.transaction import TransactionalMessageService
from actors.broker.tables.clients import ClientManager
from actors.broker.tables.delay_offsets import DelayOffsetTable
from actors.broker.tables.groups import SubscriptionGroupManager
from actors.broker.tables.locks import RebalanceLockManager
from actors.broker.tables.offsets import ConsumerOffsetManager
from actors.broker.tables.topics import TopicManager
from protocol.codes import RequestCode
from protocol.connection import Dispatcher, Handler
from storage import MessageStore


@attrs.frozen
class HandlerParts:
    """The broker's parts that its handlers use; each handler is given only its own share."""

    config: BrokerConfig
    #: The broker.conf the broker was started with (UPDATE_BROKER_CONFIG writes to it).
    config_file: Path | None
    store: MessageStore
    topics: TopicManager
    offsets: ConsumerOffsetManager
    groups: SubscriptionGroupManager
    clients: ClientManager
    locks: RebalanceLockManager
    delay_offsets: DelayOffsetTable
    ha: HighAvailability
    pull_hold: PullHoldService
    stats: BrokerStatsManager
    request_stats: RequestStats
    schedule: ScheduleMessageService
    transactions: TransactionalMessageService
    dedup: DedupIndex
    pop: PopService
    #: Controller mode's link (None without enableControllerMode).
    controller: ControllerLink | None = None


def request_table(parts: HandlerParts) -> dict[RequestCode, Handler]:
    """Every request code the broker serves, with its handler."""
    p = parts
    send_type = SendHandler if p.controller is None else ControlledSendHandler
    send_handler = send_type(
        SendParts(p.config, p.topics, p.groups, p.store, p.schedule, p.dedup, p.stats,
                  p.request_stats, p.ha.service, p.controller)
    )  # fmt: skip
    send = send_handler.__call__
    reply = ReplyHandler(ReplyParts(p.config, send_handler, p.clients, p.store, p.stats)).__call__
    pull = PullHandler(
        PullParts(p.config, p.store, p.topics, p.groups, p.offsets, p.clients, p.stats,
                  p.pull_hold)
    ).__call__  # fmt: skip
    send_back = SendBackHandler(
        SendBackParts(p.config, p.store, p.topics, p.groups, p.request_stats, p.ha, p.schedule)
    ).__call__
    clients = ClientRequests(
        ClientParts(p.config, p.store, p.topics, p.groups, p.offsets, p.clients)
    )
    config = ConfigAdmin(ConfigAdminParts(p.config, p.topics, p.groups, p.offsets, p.config_file))
    consumers = ConsumerAdmin(ConsumerAdminParts(p.config, p.store, p.topics, p.offsets, p.clients))
    stats = StatsHandlers(stats_parts(p))
    locks = LockHandlers(p.locks, p.groups, p.config.broker_name)
    replication = ReplicationQueries(p.delay_offsets)
    pop = PopHandlers(PopParts(p.config, p.store, p.topics, p.groups, p.pull_hold, p.pop))
    controller = ControllerRequests(p.controller)
    return {
        # -- messages in and out (the hot paths)
        RequestCode.SEND_MESSAGE: send,
        RequestCode.SEND_MESSAGE_V2: send,
        RequestCode.SEND_BATCH_MESSAGE: send,
        RequestCode.PULL_MESSAGE: pull,
        RequestCode.CONSUMER_SEND_MSG_BACK: send_back,
        RequestCode.END_TRANSACTION: p.transactions.end_transaction,
        RequestCode.SEND_REPLY_MESSAGE: reply,
        RequestCode.SEND_REPLY_MESSAGE_V2: reply,
        # -- RocketMQ 5's pop consumption (handlers/pop.py, services/pop.py)
        RequestCode.POP_MESSAGE: pop.pop_message,
        RequestCode.ACK_MESSAGE: pop.ack_message,
        RequestCode.BATCH_ACK_MESSAGE: pop.batch_ack_message,
        RequestCode.CHANGE_MESSAGE_INVISIBLETIME: pop.change_invisible_time,
        RequestCode.NOTIFICATION: pop.notification,
        RequestCode.QUERY_ASSIGNMENT: pop.query_assignment,
        # -- clients: heartbeats, group members, offsets, queue queries, lookups
        RequestCode.HEART_BEAT: clients.heart_beat,
        RequestCode.UNREGISTER_CLIENT: clients.unregister_client,
        RequestCode.CHECK_CLIENT_CONFIG: clients.check_client_config,
        RequestCode.GET_CONSUMER_LIST_BY_GROUP: clients.get_consumer_list_by_group,
        RequestCode.QUERY_CONSUMER_OFFSET: clients.query_consumer_offset,
        RequestCode.UPDATE_CONSUMER_OFFSET: clients.update_consumer_offset,
        RequestCode.GET_MIN_OFFSET: clients.get_min_offset,
        RequestCode.GET_MAX_OFFSET: clients.get_max_offset,
        RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: clients.search_offset_by_timestamp,
        RequestCode.GET_EARLIEST_MSG_STORETIME: clients.get_earliest_msg_storetime,
        RequestCode.VIEW_MESSAGE_BY_ID: clients.view_message_by_id,
        RequestCode.QUERY_MESSAGE: clients.query_message,
        RequestCode.LOCK_BATCH_MQ: locks.lock_batch_mq,
        RequestCode.UNLOCK_BATCH_MQ: locks.unlock_batch_mq,
        # -- operators: topics and groups
        RequestCode.UPDATE_AND_CREATE_TOPIC: config.update_and_create_topic,
        RequestCode.DELETE_TOPIC_IN_BROKER: config.delete_topic_in_broker,
        RequestCode.GET_ALL_TOPIC_CONFIG: config.get_all_topic_config,
        RequestCode.GET_TOPIC_CONFIG: config.get_topic_config,
        RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_BROKER: config.get_system_topic_list,
        RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: config.update_and_create_group,
        RequestCode.DELETE_SUBSCRIPTIONGROUP: config.delete_group,
        RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: config.get_all_group_config,
        # -- operators: connections, offsets and progress
        RequestCode.GET_CONSUMER_CONNECTION_LIST: consumers.get_consumer_connection_list,
        RequestCode.GET_PRODUCER_CONNECTION_LIST: consumers.get_producer_connection_list,
        RequestCode.GET_ALL_PRODUCER_INFO: consumers.get_all_producer_info,
        RequestCode.GET_ALL_CONSUMER_OFFSET: consumers.get_all_consumer_offset,
        RequestCode.INVOKE_BROKER_TO_RESET_OFFSET: consumers.reset_offset,
        RequestCode.CLONE_GROUP_OFFSET: consumers.clone_group_offset,
        RequestCode.QUERY_TOPIC_CONSUME_BY_WHO: consumers.query_topic_consume_by_who,
        RequestCode.QUERY_CONSUME_TIME_SPAN: consumers.query_consume_time_span,
        RequestCode.GET_CONSUMER_RUNNING_INFO: consumers.get_consumer_running_info,
        RequestCode.CONSUME_MESSAGE_DIRECTLY: consumers.consume_message_directly,
        # -- operators: the broker itself
        RequestCode.GET_BROKER_CONFIG: config.get_broker_config,
        RequestCode.UPDATE_BROKER_CONFIG: config.update_broker_config,
        RequestCode.GET_BROKER_RUNTIME_INFO: stats.get_broker_runtime_info,
        RequestCode.VIEW_BROKER_STATS_DATA: stats.view_broker_stats_data,
        RequestCode.GET_TOPIC_STATS_INFO: stats.get_topic_stats_info,
        RequestCode.GET_CONSUME_STATS: stats.get_consume_stats,
        # -- replication: what a slave's config sync reads besides the tables above
        RequestCode.GET_ALL_DELAY_OFFSET: replication.get_all_delay_offset,
        # -- controller mode (RIP-44): the controller's role notice, the epoch cache
        RequestCode.NOTIFY_BROKER_ROLE_CHANGED: controller.notify_broker_role_changed,
        RequestCode.GET_BROKER_EPOCH_CACHE: controller.get_broker_epoch_cache,
    }


def stats_parts(parts: HandlerParts) -> StatsParts:
    """The statistics requests' share of ``parts`` (also GET_BROKER_RUNTIME_INFO's)."""
    p = parts
    return StatsParts(
        p.config, p.store, p.topics, p.offsets, p.clients, p.ha, p.stats, p.pop, p.controller
    )


def register_handlers(dispatcher: Dispatcher, parts: HandlerParts) -> None:
    """Serve every code of `request_table` on ``dispatcher``."""
    for code, handler in request_table(parts).items():
        dispatcher.register(code, handler)
