"""How the server talks to the processes it starts (encoder workers, vector shard hosts): a
length-prefixed pickle per message over the child's stdin and stdout. The parent is the only
writer of what a child unpickles and the child of what the parent does, so pickle is safe here.

A child never outlives its parent: it exits when its stdin closes and, in case the parent was
killed while the child was busy, when it sees its parent process change (`watch_parent`).
"""

from __future__ import annotations

import os
import pickle
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import BinaryIO

HEADER = struct.Struct(">Q")
PARENT_CHECK_S = 0.25
_PROJECT_ROOT = Path(__file__).resolve().parents[2]


def child_env() -> dict[str, str]:
    """The server's environment, with the checkout first on the path (a child started from
    another working directory still imports this code, not an installed copy)."""
    path = os.pathsep.join(filter(None, [str(_PROJECT_ROOT), os.environ.get("PYTHONPATH")]))
    return dict(os.environ, PYTHONPATH=path)


def write_message(pipe: BinaryIO, message) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    pipe.write(HEADER.pack(len(data)) + data)
    pipe.flush()


def read_message(pipe: BinaryIO):
    """The next message; EOFError when the other side closed its end (or died) mid-way."""
    header = pipe.read(HEADER.size)
    if len(header) < HEADER.size:
        raise EOFError
    size = HEADER.unpack(header)[0]
    data = pipe.read(size)
    if len(data) < size:
        raise EOFError
    return pickle.loads(data)


def stop_child(process: subprocess.Popen, wait_s: float, farewell=None) -> bool:
    """Send `farewell` (if any), close the pipes and wait for the child to exit; kill it after
    `wait_s`. True when it exited by itself."""
    if farewell is not None:
        try:
            write_message(process.stdin, farewell)
        except (OSError, ValueError):
            pass  # it died already
    for pipe in (process.stdin, process.stdout):
        try:
            pipe.close()
        except OSError:
            pass
    try:
        process.wait(timeout=wait_s)
        return True
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        return False


# -- inside a child ---------------------------------------------------------------------------

def watch_parent(parent: int) -> None:
    """Exit when the parent is gone (reparented), even in the middle of a call: a daemon thread."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_CHECK_S)
        os._exit(1)

    threading.Thread(target=watch, name="orgmem-parent-watch", daemon=True).start()


def answer_pipe() -> BinaryIO:
    """The pipe to the parent, taken off fd 1, which then points at stderr: a library that prints
    to stdout cannot corrupt a message."""
    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    return answers


def requests_pipe() -> BinaryIO:
    return sys.stdin.buffer
