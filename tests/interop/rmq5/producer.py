"""Sends through BoltMQ's gRPC proxy with the official RocketMQ 5 Python client.

Run by tests/interop/test_rmq5_client.py with the client's own venv:

    python producer.py ENDPOINT MODE TOPIC [COUNT]

MODE is normal (COUNT messages with tags, keys and a property), fifo (COUNT messages over
three message groups), delay (one message due in COUNT seconds), transaction (three half
messages: one committed, one rolled back, one left to the server's check, which this
program's TransactionChecker commits) or try (start and send one message, printing
{"sent": ...} or {"error": ...} instead of failing). The credentials are RMQ5_ACCESS_KEY and
RMQ5_SECRET_KEY from the environment (none when unset). Prints one JSON object a line, then
{"done": true}.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time

from rocketmq import (
    ClientConfiguration,
    Credentials,
    Message,
    Producer,
    TransactionChecker,
    TransactionResolution,
)


def emit(**fields: object) -> None:
    print(json.dumps(fields), flush=True)


class CommitOnCheck(TransactionChecker):
    """Commits every half message the server asks about, and records which."""

    def __init__(self) -> None:
        self.checked: list[str] = []
        self.event = threading.Event()

    def check(self, message: Message) -> TransactionResolution:
        self.checked.append(message.message_id)
        emit(checked=message.message_id, body=message.body.decode())
        self.event.set()
        return TransactionResolution.COMMIT


def message(topic: str, body: str) -> Message:
    msg = Message()
    msg.topic = topic
    msg.body = body.encode()
    return msg


def main() -> None:
    endpoint, mode, topic = sys.argv[1:4]
    count = int(sys.argv[4]) if len(sys.argv) > 4 else 1
    credentials = Credentials(
        os.environ.get("RMQ5_ACCESS_KEY", ""), os.environ.get("RMQ5_SECRET_KEY", "")
    )
    config = ClientConfiguration(endpoint, credentials)
    checker = CommitOnCheck() if mode == "transaction" else None
    producer = Producer(config, (topic,), checker)
    if mode == "try":
        try:
            producer.startup()
            receipt = producer.send(message(topic, "tried"))
            emit(sent=receipt.message_id)
        except Exception as exc:
            emit(error=f"{type(exc).__name__}: {exc}")
        finally:
            if producer.is_running:
                producer.shutdown()
        emit(done=True)
        return
    producer.startup()
    try:
        if mode == "normal":
            for i in range(count):
                msg = message(topic, f"normal-{i}")
                msg.tag = f"Tag{i % 3}"
                msg.keys = f"key-{i}"
                msg.add_property("order", str(i))
                receipt = producer.send(msg)
                emit(sent=receipt.message_id, i=i, offset=receipt.offset)
        elif mode == "fifo":
            for i in range(count):
                group = f"group-{i % 3}"
                msg = message(topic, f"{group}:{i}")
                msg.message_group = group
                receipt = producer.send(msg)
                emit(sent=receipt.message_id, group=group, i=i)
        elif mode == "delay":
            due = int(time.time()) + count
            msg = message(topic, "delayed")
            msg.delivery_timestamp = due
            receipt = producer.send(msg)
            emit(sent=receipt.message_id, due=due)
        elif mode == "transaction":
            assert checker is not None
            for outcome in ("commit", "rollback", "check"):
                transaction = producer.begin_transaction()
                receipt = producer.send(message(topic, outcome), transaction)
                emit(sent=receipt.message_id, outcome=outcome)
                if outcome == "commit":
                    transaction.commit()
                elif outcome == "rollback":
                    transaction.rollback()
            if not checker.event.wait(30):
                emit(error="the server never checked the unresolved transaction")
                sys.exit(1)
            time.sleep(0.5)  # let the checker's EndTransaction go out before shutdown
        else:
            sys.exit(f"unknown mode {mode!r}")
    finally:
        producer.shutdown()
    emit(done=True)


if __name__ == "__main__":
    main()
