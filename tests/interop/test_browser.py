"""The browser client (web/boltmq.js) in real headless Chromium, driven with Selenium.

The page is served by ``boltmq web`` and talks to the shared cluster over websocket only. It
sends 50 messages that a Python consumer must receive exactly; messages the C++ client sends
must appear on the page with their bodies and tags, and the page's consumer group commits its
offsets. Chromium and its driver are Debian's (``chromium``, ``chromium-driver``), installed by
``./dev test`` when missing (tests/ensure_packages.sh); without them these tests skip
and say why. Every wait has a deadline.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from client import Admin, PullConsumer
from protocol.bodies import ConsumeFromWhere, MessageQueue
from tests.client.helpers import ROOT, RunningCluster, poll_until

from .cpp_client import rocketmq, send_sync_with_route

pytestmark = [pytest.mark.timeout(180)]
Unique = Callable[[str], str]
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
WAIT = 60.0
BIG = ("a compressible line of text for the zlib path\n" * 200).encode()  # > 4 KiB
SERVING = re.compile(r"serving .* on (http://[\d.]+:\d+/)")


@pytest.fixture(scope="module")
def driver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """Headless Chromium under chromedriver, with a fresh profile."""
    missing = [path for path in (CHROMIUM, CHROMEDRIVER) if not os.access(path, os.X_OK)]
    if missing:
        reason = (f"{' and '.join(missing)} not installed (Debian packages chromium and "
                  "chromium-driver; ./dev test installs them when it runs as root)")  # fmt: skip
        print(f"browser tests skipped: {reason}", file=sys.stderr)
        pytest.skip(reason)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--disable-dev-shm-usage",
        f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}",
    ):  # fmt: skip
        options.add_argument(flag)
    browser = webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))
    browser.set_page_load_timeout(WAIT)
    try:
        yield browser
    finally:
        browser.quit()


@pytest.fixture(scope="module")
def page_url(cluster_process: RunningCluster) -> Iterator[str]:
    """``boltmq web`` serving web/, its config naming the cluster's registry over websocket."""
    process = subprocess.Popen(
        [sys.executable, "-m", "boltmq.cli", "web", "--port", "0",
         "--namesrvAddr", cluster_process.ws_namesrv],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    found: list[str] = []
    ready = threading.Event()

    def read_log() -> None:
        assert process.stderr is not None
        for raw in process.stderr:
            if match := SERVING.search(raw.decode(errors="replace")):
                found.append(match.group(1))
                ready.set()
        ready.set()

    threading.Thread(target=read_log, daemon=True).start()
    try:
        assert ready.wait(WAIT) and found, "boltmq web did not start"
        yield found[0]
    finally:
        process.terminate()
        process.wait(20)


def open_page(driver: Any, url: str, topic: str) -> None:
    """Load the page and type the topic in."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get(url)
    WebDriverWait(driver, WAIT).until(
        lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-ready") == "true"
    )
    set_field(driver, "topic", topic)


def set_field(driver: Any, element_id: str, value: str) -> None:
    from selenium.webdriver.common.by import By

    field = driver.find_element(By.ID, element_id)
    field.clear()
    field.send_keys(value)


def rows(driver: Any, tbody: str) -> list[dict[str, str]]:
    """The data attributes of every row of a table body."""
    script = (f"return [...document.getElementById('{tbody}').rows]"
              ".map(r => Object.assign({}, r.dataset));")  # fmt: skip
    found: list[dict[str, str]] = driver.execute_script(script)
    return found


def wait_rows(driver: Any, tbody: str, count: int) -> list[dict[str, str]]:
    """Wait until ``tbody`` has ``count`` rows; the page's status line is in the failure."""
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    try:
        WebDriverWait(driver, WAIT).until(lambda d: len(rows(d, tbody)) >= count)
    except TimeoutException:
        status = driver.find_element(By.ID, "status").text
        pytest.fail(f"{tbody}: {len(rows(driver, tbody))} of {count} rows; page says: {status}")
    return rows(driver, tbody)


async def create_topic(namesrv: str, topic: str) -> None:
    async with Admin(namesrv_addr=namesrv) as admin:
        await admin.create_topic(topic, queue_nums=4)
        with anyio.fail_after(WAIT):
            while True:
                try:
                    await admin.route(topic)
                    return
                except Exception:
                    await anyio.sleep(0.05)


def test_the_page_sends_50_messages_a_python_consumer_receives_exactly_those(
    driver: Any, page_url: str, cluster_process: RunningCluster, unique: Unique
) -> None:
    from selenium.webdriver.common.by import By

    topic = unique("BrowserOut")
    anyio.run(create_topic, cluster_process.namesrv, topic, backend="trio")
    open_page(driver, page_url, topic)
    for field, value in (("body", "from chromium"), ("tags", "TagW"), ("keys", "k1 k2"),
                         ("properties", "ORIGIN=browser"), ("count", "50")):  # fmt: skip
        set_field(driver, field, value)
    driver.find_element(By.ID, "send").click()
    sent = wait_rows(driver, "results", 50)
    assert len(sent) == 50
    by_id = {row["msgid"]: row["body"] for row in sent}
    assert len(by_id) == 50 and all(len(msg_id) == 32 for msg_id in by_id)
    # The send results name the queues round robin, as the page shows them (mqadmin's columns).
    assert {row["queue"] for row in sent} == {"0", "1", "2", "3"}

    async def consume() -> list[Any]:
        async with PullConsumer(unique("CG"), namesrv_addr=cluster_process.namesrv,
                                consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
                                ) as consumer:  # fmt: skip
            await consumer.subscribe(topic)
            got = await poll_until(consumer, 50, timeout=WAIT)
            assert await consumer.poll(timeout=0.5) == []  # exactly those, nothing more
            return got

    got = anyio.run(consume, backend="trio")
    assert {m.msg_id: m.body.decode() for m in got} == by_id
    assert sorted(by_id.values()) == sorted(f"from chromium {i}" for i in range(50))
    assert {m.tags for m in got} == {"TagW"}
    assert all(m.keys == ["k1", "k2"] and m.properties["ORIGIN"] == "browser" for m in got)


def test_cpp_messages_appear_on_the_page_and_its_group_commits_offsets(
    driver: Any, page_url: str, cluster_process: RunningCluster, unique: Unique
) -> None:
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    topic, group = unique("CppToBrowser"), unique("BrowserCG")
    anyio.run(create_topic, cluster_process.namesrv, topic, backend="trio")
    open_page(driver, page_url, topic)
    set_field(driver, "group", group)
    driver.find_element(By.ID, "watch").click()
    try:
        WebDriverWait(driver, WAIT).until(
            lambda d: d.find_element(By.ID, "status").get_attribute("data-state") == "watching"
        )
    except TimeoutException:
        pytest.fail(f"the page did not start watching: {driver.find_element(By.ID, 'status').text}")

    producer = rocketmq.Producer(unique("CppPG"))
    producer.set_namesrv_addr(cluster_process.namesrv)
    producer.start()
    sent: dict[str, tuple[str, str]] = {}
    try:
        for i in range(10):
            body = (BIG + f"#{i}".encode()) if i == 4 else f"cpp message {i} \u2713".encode()
            tag = "TagA" if i % 2 else "TagB"
            msg = rocketmq.Message(topic)
            msg.set_tags(tag)
            msg.set_keys(f"ck-{i}")
            msg.set_body(body)
            result = send_sync_with_route(producer, msg)
            assert result.status == rocketmq.SendStatus.OK
            msg_id = result.msg_id.decode() if isinstance(result.msg_id, bytes) else result.msg_id
            sent[msg_id] = (body.decode(), tag)
    finally:
        producer.shutdown()

    shown = wait_rows(driver, "messages", 10)
    assert {row["msgid"]: (row["body"], row["tags"]) for row in shown} == sent
    driver.find_element(By.ID, "stop").click()

    async def committed() -> int:
        # The page committed each queue's next offset after showing its messages.
        async with PullConsumer(group, namesrv_addr=cluster_process.namesrv) as consumer:
            with anyio.fail_after(WAIT):
                while True:
                    total = 0
                    for queue_id in range(4):
                        queue = MessageQueue(topic=topic, broker_name=broker, queue_id=queue_id)
                        total += max(0, await consumer.committed(queue))
                    if total >= 10:
                        return total
                    await anyio.sleep(0.1)

    broker = cluster_process.found["broker_name"]
    assert anyio.run(committed, backend="trio") == 10


CLOSE_AND_RECONNECT = """
const [namesrv, topic, done] = arguments;
(async () => {
  const m = await import("/boltmq.js");
  const client = new m.BoltMQClient(namesrv);
  const queue = (await client.subscribeQueues(topic))[0];
  const broker = await client.brokerAddress(topic, queue.brokerName);
  const conn = await client.connection(broker);
  // A text message is a protocol fault: the broker closes the socket before the next frame.
  conn.ws.send("not a frame");
  const request = m.request(m.RequestCode.GET_MAX_OFFSET, { topic, queueId: queue.queueId });
  let error = null;
  try { await conn.invoke(request, 20000); } catch (e) { error = e.message; }
  const offset = await client.maxOffset(topic, queue.brokerName, queue.queueId);  // reconnects
  client.close();
  done({ broker, error, offset });
})().catch((e) => done({ fatal: String(e) }));
"""


def test_the_js_client_fails_calls_when_the_broker_closes_then_reconnects(
    driver: Any, page_url: str, cluster_process: RunningCluster, unique: Unique
) -> None:
    topic = unique("BrowserClose")
    anyio.run(create_topic, cluster_process.namesrv, topic, backend="trio")
    open_page(driver, page_url, topic)
    driver.set_script_timeout(WAIT)
    outcome = driver.execute_async_script(CLOSE_AND_RECONNECT, cluster_process.ws_namesrv, topic)
    assert "fatal" not in outcome, outcome
    assert outcome["broker"] == cluster_process.ws_broker
    assert outcome["error"].startswith(f"connection to {cluster_process.ws_broker} closed: ")
    assert "the server closed the websocket (code 1000" in outcome["error"]
    assert outcome["offset"] == 0


NEW_TOPIC = """
const [namesrv, topic, done] = arguments;
(async () => {
  const m = await import("/boltmq.js");
  const client = new m.BoltMQClient(namesrv);
  // No route yet: the send goes by TBW102's route and the broker creates the topic.
  const sent = await client.send(topic, new Uint8Array([0, 1, 2, 255]), { tags: "Bin" });
  let pulled = null;
  for (let i = 0; i < 100 && !pulled; i++) {
    try {
      pulled = await client.pull(topic, sent.brokerName, sent.queueId, sent.queueOffset,
                                 { suspendMs: 1000 });
    } catch (e) {
      if (e.code !== m.ResponseCode.TOPIC_NOT_EXIST) throw e;
      await new Promise((r) => setTimeout(r, 100));  // the broker registers the topic shortly
    }
  }
  const [message] = pulled.messages;
  client.close();
  done({ status: sent.status, pulled: pulled.status, body: Array.from(message.body),
         tags: message.tags, msgId: message.msgId === sent.msgId,
         offsetMsgId: message.offsetMsgId === sent.offsetMsgId });
})().catch((e) => done({ fatal: String(e) }));
"""


def test_the_js_client_sends_bytes_to_a_new_topic_and_pulls_them_back(
    driver: Any, page_url: str, cluster_process: RunningCluster, unique: Unique
) -> None:
    open_page(driver, page_url, "unused")
    driver.set_script_timeout(WAIT)
    topic = unique("BrowserNew")
    outcome = driver.execute_async_script(NEW_TOPIC, cluster_process.ws_namesrv, topic)
    assert outcome == {"status": "SEND_OK", "pulled": "FOUND", "body": [0, 1, 2, 255],
                       "tags": "Bin", "msgId": True, "offsetMsgId": True}  # fmt: skip


def test_chromium_is_where_the_test_set_up_puts_it() -> None:
    # A machine where the install step ran has both; this names what is missing otherwise.
    if shutil.which("apt-get") is None or os.geteuid() != 0:
        pytest.skip("the install step needs root and apt-get; the browser tests skip here")
    assert os.access(CHROMIUM, os.X_OK) and os.access(CHROMEDRIVER, os.X_OK), (
        "tests/ensure_packages.sh did not install chromium and chromium-driver; "
        "see /tmp/boltmq-chromium-install.log"
    )
    assert Path(ROOT / "web" / "boltmq.js").is_file()
