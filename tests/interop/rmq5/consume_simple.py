"""Receives through BoltMQ's gRPC proxy with the official RocketMQ 5 Python client's
SimpleConsumer.

Run by tests/interop/test_rmq5_consume.py with the client's own venv:

    python consume_simple.py ENDPOINT MODE TOPIC GROUP [COUNT]

MODE is ack (receive until COUNT messages came, ack each, then receive once more: printed as
{"after": n}) or abandon (receive a message COUNT times without acking it, invisible for 1 s
each time, so it comes back with its attempt one higher until the broker moves it to the
DLQ). Prints one JSON object a line ({"received": id, "body": ..., "attempt": n} per
message), then {"done": true}.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from rocketmq import ClientConfiguration, Credentials, FilterExpression, SimpleConsumer

#: Seconds a receive waits for a message (the proxy bounds it to its long-polling range).
AWAIT = 2
#: Seconds a message stays invisible when abandoned.
SHORT_INVISIBLE = 1


def emit(**fields: object) -> None:
    print(json.dumps(fields), flush=True)


def received(message: Any) -> None:
    emit(
        received=message.message_id,
        body=message.body.decode(),
        attempt=message.delivery_attempt,
    )


def main() -> None:
    endpoint, mode, topic, group = sys.argv[1:5]
    count = int(sys.argv[5]) if len(sys.argv) > 5 else 1
    config = ClientConfiguration(endpoint, Credentials())
    consumer = SimpleConsumer(config, group, {topic: FilterExpression()}, AWAIT)
    consumer.startup()
    try:
        deadline = time.monotonic() + 60
        if mode == "ack":
            seen = 0
            while seen < count:
                if time.monotonic() > deadline:
                    sys.exit(f"only {seen} of {count} messages received")
                for message in consumer.receive(32, 30):
                    received(message)
                    consumer.ack(message)
                    seen += 1
            emit(after=len(consumer.receive(32, 30)))
        elif mode == "abandon":
            for round_ in range(count):
                got: list[Any] = []
                while not got:
                    if time.monotonic() > deadline:
                        sys.exit(f"nothing received in round {round_}")
                    got = consumer.receive(1, SHORT_INVISIBLE)
                received(got[0])
        else:
            sys.exit(f"unknown mode {mode!r}")
    finally:
        consumer.shutdown()
    emit(done=True)


if __name__ == "__main__":
    main()
