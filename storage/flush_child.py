"""The commit log's flush process: fdatasyncs descriptors received over a Unix socket.

`storage.flush_thread.ChildFlusher` starts this file with ``sys.executable -I -S`` (an
interpreter of its own, so its fdatasync loop never waits for the broker's interpreter lock).
It imports nothing of the project and nothing heavy, so it is up in a few tens of
milliseconds; requests sent before that wait in its socket.

Protocol, on the stream socket whose descriptor is ``argv[1]``: each request is one 8-byte
native word; a word >= 0 comes with one descriptor (SCM_RIGHTS, the kernel hands over a dup
of the sender's), which is fdatasynced, closed and answered with one word, the errno or 0. A
negative word carries no descriptor and is answered ``-word`` at once (the sender could not
pass that descriptor: it was closed). Answers go back in request order. ``argv[2]``, when
given, slows every fdatasync by that many nanoseconds (tests of a slow disk).

The process ends when the socket reaches EOF: the broker closed its end (stop) or died
(even killed with SIGKILL the kernel closes it), so it never outlives the broker.
"""

from __future__ import annotations

import errno
import os
import signal
import socket
import struct
import sys
import time

_WORD = struct.Struct("=q")
#: Descriptors one receive takes at most; the sender never sends more in one message.
MAX_FDS = 64


def serve(sock: socket.socket, delay_ns: int = 0) -> int:
    """Answer requests on ``sock`` until EOF; the number of fdatasyncs run."""
    descriptors: list[int] = []
    data = b""
    served = 0
    while True:
        try:
            chunk, fds, flags, _address = socket.recv_fds(sock, MAX_FDS * _WORD.size, MAX_FDS)
        except OSError:
            return served
        descriptors.extend(fds)
        if flags & socket.MSG_CTRUNC:
            # Descriptors were dropped by the kernel: their answers could not be true.
            sys.stderr.write("commit-log flush process: descriptors truncated; exiting\n")
            return served
        if not chunk:
            return served
        data += chunk
        whole = len(data) - len(data) % _WORD.size
        answers = []
        for (word,) in _WORD.iter_unpack(data[:whole]):
            if word < 0:
                answers.append(-word)
                continue
            if not descriptors:  # a word without its descriptor: the sender broke the protocol
                sys.stderr.write("commit-log flush process: a request without a descriptor\n")
                return served
            fd = descriptors.pop(0)
            if delay_ns > 0:
                time.sleep(delay_ns / 1e9)
            try:
                os.fdatasync(fd)
                answers.append(0)
            except OSError as exc:
                answers.append(exc.errno or errno.EIO)
            finally:
                os.close(fd)
            served += 1
        data = data[whole:]
        if answers:
            try:
                sock.sendall(b"".join(_WORD.pack(answer) for answer in answers))
            except OSError:
                return served


def main(argv: list[str]) -> int:
    """Serve the socket whose descriptor is ``argv[1]`` (see the module docstring)."""
    # A Ctrl-C or SIGTERM sent to the broker's process group must not end the flushes of
    # its shutdown; EOF on the socket ends this process once the broker is gone.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    sock = socket.socket(fileno=int(argv[1]))
    delay_ns = int(argv[2]) if len(argv) > 2 else 0
    serve(sock, delay_ns)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
