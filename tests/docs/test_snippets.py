"""Every ```python block of README.md and docs/*.md runs, and does what its page says.

The rules a page's Python blocks follow (README.md, "The two commands", points here):

- A page's blocks run in order as one sequence sharing one namespace: a later block may use a
  name an earlier one made. Each page is one test case, against a registry and a broker of its
  own, started in this process: loopback, ephemeral ports, websocket listeners on, the file
  store in a temporary directory.
- Before a block runs, the registry address ``127.0.0.1:9876`` in it becomes that registry's
  real address, ``ws://127.0.0.1:9877/`` its real websocket address and ``127.0.0.1:10911``
  the broker's real address. The blocks run with the working directory and ``HOME`` in a
  temporary directory, so ``~/store`` or ``cluster.toml`` land there; an example path
  ``"/data/...`` is moved under that directory too.
- Top-level ``await`` and ``async with`` are allowed (compiled with
  ``ast.PyCF_ALLOW_TOP_LEVEL_AWAIT``): such a block runs under trio in the test's event loop,
  as the BoltMQ APIs the pages show expect. A block with neither (blocking code: the Apache
  C++ client, Spark, ``trio.run``) runs in a worker thread, so the cluster goes on serving.
- docs/pipeline.md's namespace starts with ``spark``: the suite's local[2] Spark session (the
  pipeline tests' own); the page writes its own messages before it reads them.
- ``print`` in a block writes to the page's output, which the page's check below reads with
  the namespace: a block that prints a result is checked on what it printed or kept.
- A block that cannot run here is preceded by ``<!-- snippet: not run (REASON) -->``; the
  reason is required, and `test_blocks_not_run_are_few_and_say_why` counts them.
- A page's sequence has a deadline (`PAGE_DEADLINE`, longer for Spark's page in
  `PAGE_DEADLINES`); a block that raises fails the page, and so does its check.
"""

from __future__ import annotations

import ast
import inspect
import re
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from boltmq import (
    Broker,
    BrokerConfig,
    Message,
    MQClientError,
    Producer,
    RegistryConfig,
    SendStatus,
    open_broker,
    open_registry,
)
from protocol import ResponseCode
from tests.ports import free_port

pytestmark = pytest.mark.timeout(300)

ROOT = Path(__file__).resolve().parents[2]
#: Pages whose figures and history hold commands, not Python.
NO_PYTHON = {"PERFORMANCE.md", "performance-journal.md"}
#: Seconds one page's blocks and its check may take together.
PAGE_DEADLINE = 60.0
#: Pages given longer: Spark's first jobs start its Python workers, tens of seconds on a busy
#: two-core machine (the session itself starts before the deadline begins).
PAGE_DEADLINES = {"docs/pipeline.md": 180.0}
#: The blocks allowed to stay unrun (each with its reason on the page): raise only with care.
NOT_RUN_BUDGET = 7

FENCE = re.compile(r"^(\s*)```(\S*)\s*$")
NOT_RUN = re.compile(r"^\s*<!--\s*snippet:\s*not run\s*(?:\((.*)\))?\s*-->\s*$")


@attrs.frozen
class Block:
    """One fenced code block of a page."""

    page: str
    line: int  # of the opening fence, 1-based
    code: str
    not_run: str | None  # the marker's reason ("" when the marker has none); None: it runs


def pages() -> list[str]:
    """README.md and every docs page but the performance ones, relative to the root."""
    docs = sorted(p.name for p in (ROOT / "docs").glob("*.md") if p.name not in NO_PYTHON)
    return ["README.md", *(f"docs/{name}" for name in docs)]


def code_blocks(page: str, language: str = "python") -> list[Block]:
    """The page's fenced blocks of ``language`` in order, each with the not-run marker right
    before it, if any."""
    blocks: list[Block] = []
    lines = (ROOT / page).read_text().splitlines()
    previous = ""  # the last non-blank line outside a block
    index = 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if opening is None:
            if lines[index].strip():
                previous = lines[index]
            index += 1
            continue
        indent, fence_language = opening.groups()
        start = index
        index += 1
        body: list[str] = []
        while index < len(lines) and not FENCE.match(lines[index]):
            body.append(lines[index].removeprefix(indent))
            index += 1
        index += 1  # the closing fence
        if fence_language == language:
            marker = NOT_RUN.match(previous)
            reason = None if marker is None else (marker.group(1) or "").strip()
            blocks.append(Block(page, start + 1, "\n".join(body) + "\n", reason))
        previous = ""
    return blocks


def pages_with_python() -> list[str]:
    """The pages that have at least one Python block to run."""
    return [page for page in pages() if any(block.not_run is None for block in code_blocks(page))]


# -- the cluster each page runs against ---------------------------------------------------------


@attrs.frozen
class PageCluster:
    """Addresses a page's blocks are pointed at."""

    registry_address: str
    registry_websocket: str
    broker_address: str

    def localise(self, code: str, work: Path) -> str:
        """``code`` with the documented default addresses replaced by this cluster's, and the
        example directory ``/data/`` by one under ``work`` (absolute: Spark's JVM resolves
        paths against the directory it started in)."""
        return (
            code.replace("ws://127.0.0.1:9877/", self.registry_websocket)
            .replace("127.0.0.1:9876", self.registry_address)
            .replace("127.0.0.1:10911", self.broker_address)
            .replace('"/data/', f'"{work}/data/')
        )


@asynccontextmanager
async def page_cluster(home: Path, **broker_settings: Any) -> AsyncIterator[PageCluster]:
    """A registry and a broker on loopback, websocket listeners on, data under ``home``."""
    websocket = free_port()
    registry_config = RegistryConfig(
        listen_port=0,
        bind_address="127.0.0.1",
        websocket_listen_port=websocket,
        kv_config_path=str(home / "namesrv" / "kvConfig.json"),
    )
    async with open_registry(registry_config) as registry:
        settings: dict[str, Any] = {
            "listen_port": 0,
            "bind_address": "127.0.0.1",
            "fast_port_enable": False,
            "websocket_listen_port": free_port(),
            "store_path_root_dir": str(home / "store"),
            "namesrv_addr": registry.address,
            "commit_log_idle_prefault_mb": 0,
            "mapped_file_size_commit_log": 16 << 20,
        }
        settings.update(broker_settings)
        async with open_broker(BrokerConfig(**settings)) as broker:
            yield PageCluster(registry.address, f"ws://127.0.0.1:{websocket}/", broker.address)


# -- what each page needs before it runs, and what its run must show ---------------------------

Namespace = dict[str, Any]
#: A page's check: reads the namespace and the printed output; may be async (the cluster runs).
Check = Callable[[Namespace, str, "PageCluster"], Awaitable[None] | None]


#: The bodies docs/pipeline.md's first block writes to Orders (and its second copies).
ORDER_BODIES = {f'{{"id": {i}}}'.encode() for i in range(10)}


def check_readme(ns: Namespace, out: str, cluster: PageCluster) -> None:
    assert "SendStatus.OK" in out, out  # the C++ client's send_sync result, printed
    assert ns["result"].status is SendStatus.SEND_OK
    assert re.search(r"^127\.0\.0\.1:\d+$", out, re.MULTILINE), out  # the embedded address


def check_actors(ns: Namespace, out: str, cluster: PageCluster) -> None:
    assert ns["route"] == ["10.0.0.8:10911"]  # the cast was handled before the call
    assert out.count("ChildState.RUNNING") == 3, out  # every child reported ready
    assert not ns["supervisor"].statistics().running


def check_broker(ns: Namespace, out: str, cluster: PageCluster) -> None:
    assert re.fullmatch(r"127\.0\.0\.1:\d+", ns["namesrv"]), ns["namesrv"]
    assert isinstance(ns["broker"], Broker)


def check_registry(ns: Namespace, out: str, cluster: PageCluster) -> None:
    address, statistics, *_ = out.splitlines()
    assert re.fullmatch(r"127\.0\.0\.1:\d+", address), out
    assert statistics.startswith("RegistryServiceStatistics(actor="), out


def check_client(ns: Namespace, out: str, cluster: PageCluster) -> None:
    assert out.startswith("SendStatus.SEND_OK "), out
    # The pull consumer printed the message the producer sent, tag and body.
    assert re.search(r"^\S+ paid b'\{\"id\": 43\}'$", out, re.MULTILINE), out
    assert re.search(r"^sent: \S+$", out, re.MULTILINE), out  # the async send's callback
    assert ns["result"].local_transaction_state is ns["LocalTransactionState"].COMMIT_MESSAGE
    assert ns["orders"] == {ns["result"].transaction_id: ns["order"]}
    assert ns["queues"], "the pull consumer's subscribe returned no queue"
    # The push consumer's listener printed a first batch (reconsume count 0).
    assert re.search(r"^\S+ 0 b'\{\"id\": 4\d\}'$", out, re.MULTILINE), out


def check_remoting(ns: Namespace, out: str, cluster: PageCluster) -> None:
    assert "0 held" in out, out  # the plain handler deferred to its async one
    assert ns["result"].status is SendStatus.SEND_OK  # over websocket
    [line] = [line for line in out.splitlines() if line.startswith("SendStatus.")]
    addresses = ast.literal_eval(line.split(" ", 1)[1])  # the connections the producer held
    assert addresses and all(a.startswith("ws://") for a in addresses), line


def check_storage(ns: Namespace, out: str, cluster: PageCluster) -> None:
    assert "arrived: TopicTest 0 1" in out, out  # the listener heard the group commit
    assert "PUT_OK FOUND 1" in out, out


async def check_security(ns: Namespace, out: str, cluster: PageCluster) -> None:
    assert ns["result"].status is SendStatus.SEND_OK  # signed as account RocketMQ
    # The page's plain_acl.yml is in force: the same send with a wrong secret is refused.
    wrong = {"access_key": "RocketMQ", "secret_key": "not-the-secret"}
    async with Producer("OrderProducers", namesrv_addr=cluster.registry_address, **wrong) as p:
        with pytest.raises(MQClientError) as refused:
            await p.send(Message("topicB", b"hello"))
    assert refused.value.code == ResponseCode.NO_PERMISSION, refused.value


def acl_settings(home: Path) -> dict[str, Any]:
    """ACL on, with the plain_acl.yml docs/security.md shows."""
    [accounts, *_] = code_blocks("docs/security.md", "yaml")
    path = home / "plain_acl.yml"
    path.write_text(accounts.code)
    return {"acl_enable": True, "plain_acl_file": str(path)}


def check_pipeline(ns: Namespace, out: str, cluster: PageCluster) -> None:
    spark = ns["spark"]
    copied = (
        spark.read.format("boltmq")
        .option("namesrvAddr", cluster.registry_address)
        .option("topic", "OrdersCopy")
        .load()
    )
    # The batch write copied every message the page wrote (the streaming write adds more).
    bodies = {bytes(row.body) for row in copied.select("body").collect()}
    assert bodies == ORDER_BODIES, bodies
    printed = out.split()
    assert "5" in printed, out  # the tag filter Spark applied: 5 of the 10 are paid
    assert "10" in printed, out  # the streaming query copied all 10 to the lake


async def check_celery(ns: Namespace, out: str, cluster: PageCluster) -> None:
    # The task the page sent waits in the page's broker, in topic "celery".
    assert ns["app"].conf.broker_url == f"boltmq://{cluster.registry_address}"

    def backlog() -> int:
        with ns["app"].connection_for_write() as connection:
            declared = connection.default_channel.queue_declare("celery", passive=True)
            return int(declared.message_count)

    assert await trio.to_thread.run_sync(backlog) == 1


CHECKS: dict[str, Check] = {
    "README.md": check_readme,
    "docs/celery.md": check_celery,
    "docs/actors.md": check_actors,
    "docs/broker.md": check_broker,
    "docs/client.md": check_client,
    "docs/pipeline.md": check_pipeline,
    "docs/registry.md": check_registry,
    "docs/remoting.md": check_remoting,
    "docs/security.md": check_security,
    "docs/storage.md": check_storage,
}
#: Broker settings a page's cluster needs, made in the cluster's home before it starts.
CLUSTER_SETTINGS: dict[str, Callable[[Path], dict[str, Any]]] = {
    "docs/security.md": acl_settings,
}


# -- running a page -----------------------------------------------------------------------------


class Output:
    """``print`` for the blocks: collects what they print, from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._parts: list[str] = []

    def print(
        self, *values: object, sep: str | None = None, end: str | None = None, **_: Any
    ) -> None:
        """As the builtin: ``values`` joined by ``sep``, then ``end``."""
        text = (" " if sep is None else sep).join(map(str, values))
        with self._lock:
            self._parts.append(text + ("\n" if end is None else end))

    def text(self) -> str:
        """Everything printed so far."""
        with self._lock:
            return "".join(self._parts)


async def run_block(block: Block, code: str, ns: Namespace) -> None:
    """Run one block in ``ns``: awaited under trio if it awaits, else in a worker thread."""
    compiled = compile(
        code, f"{block.page}:{block.line}", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    )
    if compiled.co_flags & inspect.CO_COROUTINE:
        await eval(compiled, ns)
    else:
        # Abandoned on cancellation, so a hung blocking block fails the page at its deadline.
        await trio.to_thread.run_sync(in_thread, ns, exec, compiled, ns, abandon_on_cancel=True)


def in_thread(ns: Namespace, fn: Callable[..., Any], *args: Any) -> Any:
    """Call ``fn`` in a worker thread as a notebook's main thread would: Spark's JVM keeps the
    active session per thread, and a write from a thread without one finds no Python data
    source (DATA_SOURCE_NOT_FOUND), so the namespace's session is made active here first."""
    spark = ns.get("spark")
    if spark is not None:
        spark._jvm.org.apache.spark.sql.SparkSession.setActiveSession(spark._jsparkSession)
    return fn(*args)


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """The pipeline tests' Spark session (local[2]), started only for a page that needs it."""
    from tests.pipeline.helpers import spark_session

    session = spark_session()
    try:
        yield session
    finally:
        session.stop()


@pytest.mark.parametrize("page", pages_with_python())
async def test_page_blocks_run(
    page: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    """The page's Python blocks run in order against a cluster of its own, then its check."""
    # Before HOME moves: the session's JVM outlives this test.
    spark = request.getfixturevalue("spark") if page == "docs/pipeline.md" else None
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("HOME", str(work))
    output = Output()
    ns: Namespace = {"__name__": "__snippets__", "print": output.print}
    if spark is not None:
        ns["spark"] = spark
    home = tmp_path / "cluster"
    home.mkdir()
    settings = CLUSTER_SETTINGS.get(page, lambda _: {})(home)
    async with page_cluster(home, **settings) as cluster:
        try:
            where = "its check"
            deadline = PAGE_DEADLINES.get(page, PAGE_DEADLINE)
            try:
                with trio.fail_after(deadline):
                    for block in code_blocks(page):
                        if block.not_run is None:
                            where = f"the block at {block.page}:{block.line}"
                            started = trio.current_time()
                            await run_block(block, cluster.localise(block.code, work), ns)
                            took = trio.current_time() - started
                            print(f"{block.page}:{block.line} ran in {took:.1f} s")
                    where = "its check"
                    await run_check(CHECKS[page], ns, output.text(), cluster)
            except trio.TooSlowError:
                pytest.fail(f"{page} passed its {deadline:.0f} s deadline in {where}")
        finally:
            if spark is not None:  # a streaming block's query would run on, into the next page
                for query in spark.streams.active:
                    await trio.to_thread.run_sync(query.stop)


async def run_check(check: Check, ns: Namespace, out: str, cluster: PageCluster) -> None:
    """Await an async check; run a plain one in a worker thread (it may block, as Spark does)."""
    if inspect.iscoroutinefunction(check):
        await check(ns, out, cluster)
    else:
        await trio.to_thread.run_sync(
            in_thread, ns, check, ns, out, cluster, abandon_on_cancel=True
        )


def test_blocks_not_run_are_few_and_say_why() -> None:
    """Every not-run marker gives a reason and precedes a Python block; they stay few."""
    blocks = [block for page in pages() for block in code_blocks(page)]
    marked = [block for block in blocks if block.not_run is not None]
    assert all(block.not_run for block in marked), [
        f"{b.page}:{b.line}" for b in marked if not b.not_run
    ]
    markers = sum(
        1
        for page in pages()
        for line in (ROOT / page).read_text().splitlines()
        if NOT_RUN.match(line)
    )
    assert markers == len(marked), "a not-run marker must sit right before a ```python block"
    assert len(marked) <= NOT_RUN_BUDGET, [f"{b.page}:{b.line} ({b.not_run})" for b in marked]


def test_every_page_with_python_blocks_has_a_check() -> None:
    """A page whose blocks run is checked on what they did, not only on raising nothing."""
    assert sorted(set(pages_with_python()) - set(CHECKS)) == []


def test_the_performance_pages_hold_no_python() -> None:
    """The pages this module skips have no Python block that would go untested."""
    for name in NO_PYTHON:
        path = ROOT / "docs" / name
        if path.exists():
            assert "```python" not in path.read_text(), name
