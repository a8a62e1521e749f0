"""Receives through BoltMQ's gRPC proxy with the official RocketMQ 5 Python client's
PushConsumer and a message listener.

Run by tests/interop/test_rmq5_consume.py with the client's own venv:

    python consume_push.py ENDPOINT TOPIC GROUP COUNT

The listener records every message and answers SUCCESS (the client acks); the program waits
until COUNT distinct messages came (60 s at most), prints {"received": id, "body": ...} for
each, then {"done": true}.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from typing import Any

from rocketmq import (
    ClientConfiguration,
    ConsumeResult,
    Credentials,
    FilterExpression,
    MessageListener,
    PushConsumer,
)


def emit(**fields: object) -> None:
    print(json.dumps(fields), flush=True)


class Recorder(MessageListener):
    """Keeps each message's body by message id; sets `enough` at the count wanted."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.bodies: dict[str, str] = {}
        self.lock = threading.Lock()
        self.enough = threading.Event()

    def consume(self, message: Any) -> ConsumeResult:
        with self.lock:
            self.bodies[message.message_id] = message.body.decode()
            if len(self.bodies) >= self.count:
                self.enough.set()
        return ConsumeResult.SUCCESS


def main() -> None:
    endpoint, topic, group, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    config = ClientConfiguration(endpoint, Credentials())
    recorder = Recorder(count)
    consumer = PushConsumer(config, group, recorder, {topic: FilterExpression()})
    consumer.startup()
    try:
        if not recorder.enough.wait(60):
            sys.exit(f"only {len(recorder.bodies)} of {count} messages received")
        time.sleep(0.5)  # let the last acks go out before shutdown
    finally:
        consumer.shutdown()
    with recorder.lock:
        for message_id, body in recorder.bodies.items():
            emit(received=message_id, body=body)
    emit(done=True)


if __name__ == "__main__":
    main()
