"""The SYNC_FLUSH group commit's flush thread: one long-lived thread that runs fdatasync.

RocketMQ's GroupCommitService is a thread of its own that flushes while the put threads keep
appending. Here the group commit service is a trio task; it used to run each flush through
``trio.to_thread.run_sync``, whose hand-off (thread cache, capacity limiter, context copy,
the reschedule) cost about 55-65 us of CPU per flush in the trio thread, on the path of every
SYNC_FLUSH answer. `FlushThread` keeps one thread waiting on a condition variable instead: a
flush is one notify to start and one ``TrioToken.run_sync_soon`` to hand the outcome back.

Requests that arrive while a flush runs are served by the next one (each caller waits for a
flush that *starts* after its request, so the flush covers everything appended before it).

`NogilFlusher` goes one step further where the compiled ``protocol._speedups`` is built: its
thread runs ``flush_loop``, which reads file descriptors from a pipe, fdatasyncs them and
writes each outcome to another pipe without ever taking the interpreter lock. The trio thread
plans a flush (`CommitLog.flush_plan`: which files, up to where), writes their descriptors and
waits for the done pipe to become readable; the fdatasync starts at once, even while the trio
thread keeps appending, as RocketMQ's GroupCommitService thread does.

Without the compiled module, `ChildFlusher` does the same with the loop in a small process of
its own (`storage.flush_child`, its own interpreter, so its fdatasyncs never wait for this
one's lock): each descriptor is passed over a Unix socketpair (SCM_RIGHTS), the answers come
back on it. Where that process cannot run (not Linux, or it fails to start), or for a commit
log file flushed with msync, `FlushThread` serves instead.
"""

from __future__ import annotations

import collections
import errno
import logging
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

import trio

if TYPE_CHECKING:
    from storage.commit_log import CommitLog, FlushPlan

_compiled_flush_loop: Callable[[int, int, int], int] | None
try:
    from protocol._speedups import flush_loop as _compiled_flush_loop
except ImportError:  # not built: FlushThread serves
    _compiled_flush_loop = None

__all__ = [
    "ChildFlusher",
    "FlushServerEnded",
    "Flusher",
    "FlushRequest",
    "FlushThread",
    "NogilFlusher",
    "flush_loop_py",
    "make_flusher",
]

log = logging.getLogger("boltmq.storage")

_WORD = struct.Struct("=q")  # one request (a descriptor; negative: stop) or one answer (errno)
_STOP = _WORD.pack(-1)


class FlushServerEnded(RuntimeError):
    """What ran the fdatasyncs (a flush process, a flush thread) ended before answering.

    Not a disk error: what it did not answer is not known to be durable, so its puts are not
    confirmed, but a later flush by a new server may cover them."""


class Waitable(Protocol):
    """A flush asked for: ``await wait()`` returns once it is done (raises what it raised)."""

    async def wait(self) -> None: ...


class Flusher(Protocol):
    """What the group commit service needs of a flusher."""

    def start(self) -> None: ...
    def stop(self) -> None: ...
    def request(self) -> Waitable: ...


class FlushRequest:
    """One caller waiting for a flush: woken with the flush's error (None when it worked)."""

    __slots__ = ("done", "error")

    def __init__(self) -> None:
        self.done = trio.Event()
        self.error: BaseException | None = None

    async def wait(self) -> None:
        """Wait for the flush; raises what it raised (see `FlushThread.wait`)."""
        await self.done.wait()
        if self.error is not None:
            raise self.error


class FlushThread:
    """Runs ``flush`` in a dedicated thread for trio callers (`request`, `wait`); `stop` ends it."""

    def __init__(self, flush: Callable[[], object], name: str = "commit-log-flush") -> None:
        self._flush = flush
        self._name = name
        self._condition = threading.Condition(threading.Lock())
        self._requests: list[FlushRequest] = []
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._token: trio.lowlevel.TrioToken | None = None

    def start(self) -> None:
        """Start the thread (from the trio thread whose callers it answers)."""
        self._token = trio.lowlevel.current_trio_token()
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Let the thread end after the flush it may be running (never blocks)."""
        with self._condition:
            self._stopping = True
            self._condition.notify()
        self._thread = None

    def request(self) -> FlushRequest:
        """Ask for a flush that starts after this call; `wait` for it (or drop it)."""
        request = FlushRequest()
        with self._condition:
            if self._stopping or self._thread is None:
                raise RuntimeError("the commit log's flush thread is not running")
            self._requests.append(request)
            self._condition.notify()
        return request

    @staticmethod
    async def wait(request: FlushRequest) -> None:
        """Wait for ``request``'s flush; raises what the flush raised.

        Cancelled (a flush timeout), the caller stops waiting; the flush still runs and a
        later request is served by the next one."""
        await request.done.wait()
        if request.error is not None:
            raise request.error

    async def flush_once(self) -> None:
        """`request` a flush and `wait` for it."""
        await self.wait(self.request())

    def _run(self) -> None:
        condition = self._condition
        token = self._token
        assert token is not None
        while True:
            with condition:
                while not self._requests and not self._stopping:
                    condition.wait()
                if self._stopping:
                    requests, self._requests = self._requests, []
                    error: BaseException | None = RuntimeError("the store writer stopped")
                    self._answer(token, requests, error)
                    return
                requests, self._requests = self._requests, []
            error = None
            try:
                self._flush()
            except BaseException as exc:  # handed to the waiting trio task, raised there
                error = exc
            if not self._answer(token, requests, error):
                return

    @staticmethod
    def _answer(
        token: trio.lowlevel.TrioToken, requests: list[FlushRequest], error: BaseException | None
    ) -> bool:
        """Wake ``requests`` in the trio thread; False once that trio run has ended."""
        if not requests:
            return True
        try:
            token.run_sync_soon(_wake, requests, error)
        except trio.RunFinishedError:
            return False
        return True


def _wake(requests: list[FlushRequest], error: BaseException | None) -> None:
    for request in requests:
        request.error = error
        request.done.set()


def make_flusher(commit_log: CommitLog) -> Flusher:
    """The compiled `NogilFlusher` when ``protocol._speedups`` is built, else the
    `ChildFlusher` where a flush process can run, else `FlushThread` (logged, with why)."""
    if NogilFlusher.available():
        return NogilFlusher(commit_log)
    reason = ChildFlusher.unavailable()
    if reason is None:
        return ChildFlusher(commit_log)
    log.info("commit log: SYNC_FLUSH flushes in a Python thread (slower: it waits for the "
             "interpreter lock after each fdatasync): no flush process, %s", reason)  # fmt: skip
    return FlushThread(commit_log.flush)


def flush_loop_py(request_fd: int, done_fd: int, delay_ns: int = 0) -> int:
    """Pure twin of the compiled ``flush_loop`` (same pipes, same words, same answers)."""
    served = 0
    while True:
        data = b""
        while len(data) < _WORD.size:
            try:
                chunk = os.read(request_fd, _WORD.size - len(data))
            except OSError:
                return served
            if not chunk:
                return served
            data += chunk
        (fd,) = _WORD.unpack(data)
        if fd < 0:
            return served
        if delay_ns > 0:
            time.sleep(delay_ns / 1e9)
        try:
            os.fdatasync(fd)
            answer = 0
        except OSError as exc:
            answer = exc.errno or errno.EIO
        served += 1
        try:
            os.write(done_fd, _WORD.pack(answer))
        except OSError:
            return served


class _PlannedFlush:
    """One `NogilFlusher` flush: its plan and the answers (errnos) come back so far."""

    __slots__ = ("_flusher", "error", "errors", "finished", "plan")

    def __init__(self, flusher: NogilFlusher, plan: FlushPlan) -> None:
        self._flusher = flusher
        self.plan = plan
        self.errors: list[int] = []
        self.finished = False
        self.error: BaseException | None = None

    async def wait(self) -> None:
        """Wait until every file of the plan was synced; raises if the flush thread ended.

        Cancelled, the flush goes on; the next wait takes its answers first (in order)."""
        while not self.finished:
            await self._flusher.receive()
        if self.error is not None:
            raise self.error


class NogilFlusher:
    """The commit log's flush in a thread that never needs the interpreter lock (see above).

    One plan per `request`, taken in the trio thread: each file's descriptor goes down the
    request pipe at once, so its fdatasync starts after everything appended before the call.
    Answers come back in order; the plan is completed (`CommitLog.flush_done`) in the trio
    thread when its last file's answer is read. ``delay_ns`` slows each fdatasync (tests)."""

    def __init__(self, commit_log: CommitLog, delay_ns: int = 0) -> None:
        self._commit_log = commit_log
        self._delay_ns = delay_ns
        self._loop: Callable[[int, int, int], int] | None = _compiled_flush_loop
        self._fallback = FlushThread(commit_log.flush)
        self._pending: collections.deque[_PlannedFlush] = collections.deque()
        self._buffer = b""
        self._request_fd = -1
        self._done_fd = -1
        self._thread: threading.Thread | None = None

    @staticmethod
    def available() -> bool:
        """Whether the compiled flush loop is built."""
        return _compiled_flush_loop is not None

    def start(self, loop: Callable[[int, int, int], int] | None = None) -> None:
        """Start the flush thread (``loop``: the pure twin instead of the compiled one)."""
        run = loop or self._loop
        if run is None:
            raise RuntimeError("protocol._speedups is not built; ./dev build-ext builds it")
        self._fallback.start()
        request_read, self._request_fd = os.pipe()
        self._done_fd, done_write = os.pipe()
        os.set_blocking(self._done_fd, False)
        self._buffer = b""

        def serve() -> None:
            try:
                run(request_read, done_write, self._delay_ns)
            finally:
                os.close(request_read)
                os.close(done_write)

        self._thread = threading.Thread(target=serve, name="commit-log-flush", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Let the thread end after the fdatasyncs already asked for (never blocks)."""
        self._fallback.stop()
        if self._thread is None:
            return
        self._thread = None
        try:
            os.write(self._request_fd, _STOP)
        except OSError:
            pass  # the thread has ended already
        os.close(self._request_fd)
        trio.lowlevel.notify_closing(self._done_fd)
        os.close(self._done_fd)
        self._request_fd = self._done_fd = -1
        self._fail(RuntimeError("the store writer stopped"))

    def request(self) -> Waitable:
        """Plan a flush of everything appended so far and start its fdatasyncs."""
        if self._done_fd < 0:
            raise RuntimeError(f"the commit log's {self._what} is not running")
        commit_log = self._commit_log
        plan = commit_log.flush_plan()
        if plan is None:  # a file flushed with msync: the plain flush thread serves it
            return self._fallback.request()
        flush = _PlannedFlush(self, plan)
        if not plan.files:
            commit_log.flush_done(plan, [])
            flush.finished = True
            return flush
        try:
            self._send([fd for _m, fd, _t in plan.files])
        except OSError as exc:
            flush.error = self._ended_error(f"{self._ended()}: {exc}")
            flush.finished = True
            return flush
        self._pending.append(flush)
        return flush

    async def receive(self) -> None:
        """Wait for answers on the done pipe and complete the plans they finish, in order."""
        try:
            await trio.lowlevel.wait_readable(self._done_fd)
        except trio.ClosedResourceError:  # stopped or replaced meanwhile: `_fail` answered
            return
        try:
            data = self._read()
        except BlockingIOError:
            return
        if not data:
            self._fail(self._ended_error(self._ended()))
            return
        data = self._buffer + data
        whole = len(data) - len(data) % _WORD.size
        self._buffer = data[whole:]
        pending = self._pending
        for (answer,) in _WORD.iter_unpack(data[:whole]):
            flush = pending[0]
            flush.errors.append(answer)
            if len(flush.errors) == len(flush.plan.files):
                pending.popleft()
                self._commit_log.flush_done(flush.plan, flush.errors)
                flush.finished = True

    #: What serves the fdatasyncs, for errors ("the commit log's flush thread has ended").
    _what = "flush thread"
    #: Raised when it ended: the compiled thread ends only if its pipes fail, which ends
    #: the writer as any flush error does (a flush process is replaced: `ChildFlusher`).
    _ended_error: type[RuntimeError] = RuntimeError

    def _send(self, fds: list[int]) -> None:
        """Ask for the fdatasync of ``fds`` (raises OSError once the server has ended)."""
        os.write(self._request_fd, b"".join(_WORD.pack(fd) for fd in fds))

    def _read(self) -> bytes:
        """Answers available now (b"" at EOF; BlockingIOError when there are none)."""
        return os.read(self._done_fd, 64 * _WORD.size)

    def _ended(self) -> str:
        return f"the commit log's {self._what} has ended"

    def _fail(self, error: BaseException) -> None:
        while self._pending:
            flush = self._pending.popleft()
            flush.error = error
            flush.finished = True


_CHILD_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "flush_child.py")
#: Descriptors passed in one message (`storage.flush_child.MAX_FDS` takes at most that many).
_FDS_PER_MESSAGE = 64


class ChildFlusher(NogilFlusher):
    """`NogilFlusher` for the pure path: the fdatasync loop runs in a process of its own.

    Without the compiled loop a flush thread needs the interpreter lock after each fdatasync,
    and gets it only at the trio thread's next switch interval (5 ms) while it is busy. The
    loop of `storage.flush_child` runs in its own interpreter instead, started with
    ``sys.executable -I -S``: each file's descriptor goes to it over a Unix socketpair
    (SCM_RIGHTS hands it a dup), it fdatasyncs, closes the dup and writes one answer word back
    on the same socket, which the trio thread waits on as `NogilFlusher` waits on its pipe.

    The process ends at EOF of its socket: `stop` closes it (the fdatasyncs already asked for
    still run; the process is reaped by a short-lived thread) and a broker killed outright has
    it closed by the kernel. If the process dies on its own the flushes waiting for it fail
    with `FlushServerEnded`, naming its pid and how it ended (nothing they cover is reported
    durable), and the next request starts another, `RESTARTS` times. Where a process cannot
    be started (or died again) the commit log's `FlushThread` serves every flush (logged)."""

    _what = "flush process"
    _ended_error = FlushServerEnded

    #: Processes started after one died, before `FlushThread` serves instead.
    RESTARTS = 1

    def __init__(self, commit_log: CommitLog, delay_ns: int = 0) -> None:
        super().__init__(commit_log, delay_ns)
        self._loop = None
        self._socket: socket.socket | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._degraded = False
        self._lost = False  # the process died; the next request replaces it
        self._restarts_left = self.RESTARTS

    @staticmethod
    def unavailable() -> str | None:
        """Why a flush process cannot run here, or None when it can."""
        if not sys.platform.startswith("linux"):
            return f"it needs Linux (this is {sys.platform})"
        if not hasattr(socket, "send_fds"):
            return "socket.send_fds (passing descriptors) is missing"
        if not sys.executable:
            return "sys.executable is empty: no interpreter to start it with"
        return None

    @property
    def pid(self) -> int | None:
        """The flush process's pid while it was started and not stopped."""
        return self._process.pid if self._process is not None else None

    def start(self, loop: Callable[[int, int, int], int] | None = None) -> None:
        """Start the flush process (``loop`` is unused: the process runs its own)."""
        self._fallback.start()
        self._lost = False
        self._restarts_left = self.RESTARTS
        self._degraded = False
        self._spawn()

    def stop(self) -> None:
        """Close the socket: the process ends after the fdatasyncs asked for (never blocks)."""
        self._fallback.stop()
        self._close(RuntimeError("the store writer stopped"))

    def request(self) -> Waitable:
        """Plan a flush and pass its descriptors to the process (`FlushThread` if it failed)."""
        if self._lost:
            self._replace()
        if self._degraded:
            return self._fallback.request()
        return super().request()

    def _spawn(self) -> None:
        """Start a process on a new socketpair; where it cannot start, degrade (logged)."""
        self._buffer = b""
        reason = self.unavailable()
        if reason is None:
            parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                command = [sys.executable, "-I", "-S", _CHILD_SCRIPT, str(child.fileno())]
                self._process = subprocess.Popen(
                    [*command, str(self._delay_ns)],
                    pass_fds=(child.fileno(),),
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                )
            except OSError as exc:
                parent.close()
                reason = f"starting {sys.executable} failed: {exc}"
            finally:
                child.close()
        if reason is not None:
            self._degrade(f"no flush process, {reason}")
            return
        self._socket = parent
        self._done_fd = parent.fileno()

    def _degrade(self, why: str) -> None:
        log.warning("commit log: SYNC_FLUSH flushes in a Python thread (slower: it waits for "
                    "the interpreter lock after each fdatasync): %s", why)  # fmt: skip
        self._degraded = True

    def _replace(self) -> None:
        """The process died: start another (`RESTARTS` times), then leave it to the thread."""
        process = self._process
        pid = process.pid if process is not None else None
        ended = FlushServerEnded(self._ended())
        self._lost = False
        self._close(ended)
        if self._restarts_left <= 0:
            self._degrade(f"the flush process died again (pid {pid})")
            return
        self._restarts_left -= 1
        self._spawn()
        if self._process is not None:
            log.warning("commit log: flush process %d started in place of %s, which died",
                        self._process.pid, pid)  # fmt: skip

    def _close(self, error: BaseException) -> None:
        """Close the socket (the process ends at EOF), fail what waits, reap off this thread."""
        sock, self._socket = self._socket, None
        process, self._process = self._process, None
        if sock is not None:
            trio.lowlevel.notify_closing(sock)
            sock.close()
            self._done_fd = -1
            self._fail(error)
        if process is not None and process.poll() is None:
            # Reaped off the trio thread: the process may still be in an fdatasync.
            threading.Thread(
                target=process.wait, name="commit-log-flush-reaper", daemon=True
            ).start()

    def _send(self, fds: list[int]) -> None:
        sock = self._socket
        assert sock is not None  # request checked it runs
        for at in range(0, len(fds), _FDS_PER_MESSAGE):
            chunk = fds[at : at + _FDS_PER_MESSAGE]
            try:
                _send_all(sock, chunk)
            except OSError as exc:
                if exc.errno != errno.EBADF:
                    raise
                # A descriptor closed since it was planned (a file destroyed meanwhile): the
                # others go one by one, that one's answer is EBADF as the thread's would be.
                for fd in chunk:
                    try:
                        _send_all(sock, [fd])
                    except OSError as one:
                        if one.errno != errno.EBADF:
                            raise
                        sock.sendall(_WORD.pack(-errno.EBADF))

    def _read(self) -> bytes:
        sock = self._socket
        if sock is None:
            raise BlockingIOError
        try:
            return sock.recv(64 * _WORD.size, socket.MSG_DONTWAIT)
        except ConnectionResetError:  # it died with requests unread: an end, as EOF is
            return b""

    def _ended(self) -> str:
        process = self._process
        if process is None:
            return "the commit log's flush process has ended"
        try:
            # Its socket closed as it exited: the exit status follows within moments.
            code: int | None = process.wait(0.1)
        except subprocess.TimeoutExpired:
            code = None
        if code is None:
            how = "still exiting"
        elif code < 0:
            try:
                how = f"killed by {signal.Signals(-code).name}"
            except ValueError:  # a signal without a name (a real-time one)
                how = f"killed by signal {-code}"
        else:
            how = f"exit status {code}"
        self._lost = True  # the next request starts another
        return f"the commit log's flush process (pid {process.pid}) has ended ({how})"


def _send_all(sock: socket.socket, fds: list[int]) -> None:
    """One request word per descriptor in ``fds``, the descriptors passed with the first."""
    data = b"".join(_WORD.pack(fd) for fd in fds)
    sent = socket.send_fds(sock, [data], fds)
    if sent < len(data):
        sock.sendall(data[sent:])
