"""Load from the official RocketMQ 5 Python client, run by `bench proxy` with that client's
own interpreter (it cannot share BoltMQ's: its import name ``rocketmq`` is the C++ client's).

    python rmq5_load.py send ENDPOINT TOPIC COUNT WINDOW
    python rmq5_load.py receive ENDPOINT TOPIC GROUP COUNT

``send`` keeps up to WINDOW sends in flight (send_async) until COUNT are acknowledged;
``receive`` receives batches of 32 with a SimpleConsumer and acks each (ack_async) until COUNT
were acked. Each prints one JSON line: {"messages": n, "seconds": s} (the client's own
start-up excluded).
"""

from __future__ import annotations

import json
import sys
import threading
import time

from rocketmq import (
    ClientConfiguration,
    Credentials,
    FilterExpression,
    Message,
    Producer,
    SimpleConsumer,
)

BODY = b"x" * 1024


def send(endpoint: str, topic: str, count: int, window: int) -> None:
    producer = Producer(ClientConfiguration(endpoint, Credentials()), (topic,))
    producer.startup()
    slots = threading.Semaphore(window)
    done = threading.Event()
    acked = 0
    lock = threading.Lock()

    def finished(future: object) -> None:
        nonlocal acked
        slots.release()
        with lock:
            acked += 1
            if acked == count:
                done.set()

    started = time.perf_counter()
    for _ in range(count):
        slots.acquire()
        message = Message()
        message.topic = topic
        message.body = BODY
        producer.send_async(message).add_done_callback(finished)
    done.wait(600)
    seconds = time.perf_counter() - started
    producer.shutdown()
    print(json.dumps({"messages": acked, "seconds": seconds}), flush=True)


def receive(endpoint: str, topic: str, group: str, count: int) -> None:
    consumer = SimpleConsumer(
        ClientConfiguration(endpoint, Credentials()), group, {topic: FilterExpression("*")}
    )
    consumer.startup()
    received = 0
    started = time.perf_counter()
    deadline = started + 600
    pending = []
    while received < count and time.perf_counter() < deadline:
        for message in consumer.receive(32, 30):
            # 5.1.2's ack_async drops the future its _ack_async returns.
            pending.append(consumer._ack_async(message))
            received += 1
    # Futures of the client's own loop (asyncio's, which take no timeout): wait for each.
    deadline = time.perf_counter() + 60
    while not all(future.done() for future in pending) and time.perf_counter() < deadline:
        time.sleep(0.01)
    failed = [future.exception() for future in pending if future.done() and future.exception()]
    if failed or not all(future.done() for future in pending):
        raise RuntimeError(f"acks failed or unfinished: {failed[:3]}")
    seconds = time.perf_counter() - started
    consumer.shutdown()
    print(json.dumps({"messages": received, "seconds": seconds}), flush=True)


if __name__ == "__main__":
    mode, *args = sys.argv[1:]
    if mode == "send":
        send(args[0], args[1], int(args[2]), int(args[3]))
    else:
        receive(args[0], args[1], args[2], int(args[3]))
