"""The broker's one request-code table: every code the broker serves and the handler serving it.

Plain functions are answered inline by the connection's reader (queries, and changes that need
no waiting); ``async`` handlers run in a task of their own (a pull that may be held, calls
relayed to a consumer). The handlers live with what they serve: sends in send_handler.py, pulls
in pull_handler.py, retries in send_back.py, transactions in transaction.py, orderly locks in
locks.py, the clients' other requests in client_requests.py, the operator's in config_admin.py
(settings, topics, groups), consumer_admin.py (connections, offsets, progress, relayed calls)
and stats.py, the slave's delay-offset sync in ha/.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from actors.broker.client_requests import ClientRequests
from actors.broker.config_admin import ConfigAdmin
from actors.broker.consumer_admin import ConsumerAdmin
from actors.broker.locks import LockHandlers
from actors.broker.pull_handler import PullHandler
from actors.broker.send_back import SendBackHandler
from actors.broker.send_handler import SendHandler
from actors.broker.stats import StatsHandlers
from protocol.codes import RequestCode
from protocol.connection import Dispatcher, Handler

if TYPE_CHECKING:
    from actors.broker.service import Broker


def request_table(broker: Broker) -> dict[RequestCode, Handler]:
    """Every request code ``broker`` serves, with its handler."""
    send = SendHandler(broker).__call__
    clients = ClientRequests(broker)
    config = ConfigAdmin(broker)
    consumers = ConsumerAdmin(broker)
    stats = StatsHandlers(broker)
    locks = LockHandlers(broker)
    return {
        # -- messages in and out (the hot paths)
        RequestCode.SEND_MESSAGE: send,
        RequestCode.SEND_MESSAGE_V2: send,
        RequestCode.SEND_BATCH_MESSAGE: send,
        RequestCode.PULL_MESSAGE: PullHandler(broker).__call__,
        RequestCode.CONSUMER_SEND_MSG_BACK: SendBackHandler(broker).__call__,
        RequestCode.END_TRANSACTION: broker.transactions.end_transaction,
        # -- clients: heartbeats, group members, offsets, queue queries, lookups
        RequestCode.HEART_BEAT: clients.heart_beat,
        RequestCode.UNREGISTER_CLIENT: clients.unregister_client,
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
        RequestCode.GET_ALL_DELAY_OFFSET: broker.ha.get_all_delay_offset,
    }


def register_handlers(dispatcher: Dispatcher, broker: Broker) -> None:
    """Serve every code of `request_table` on ``dispatcher``."""
    for code, handler in request_table(broker).items():
        dispatcher.register(code, handler)
