"""Newline-delimited JSON over the pool's sockets and pipes."""

from __future__ import annotations

import json
import os
import select
import socket
import struct
from typing import Any


def encode(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode() + b"\n"


class Lines:
    """Reads JSON lines from a file descriptor (a socket's or a pipe's)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._buf = b""
        self.eof = False

    def feed(self) -> list[Any]:
        """Read what is there (one ``read``), return the complete messages."""
        chunk = os.read(self.fd, 65536)
        if not chunk:
            self.eof = True
        self._buf += chunk
        *lines, self._buf = self._buf.split(b"\n")
        out = []
        for line in lines:
            if line.strip():
                try:
                    out.append(json.loads(line))
                except ValueError:
                    continue  # not ours; the peer said something we cannot read
        return out

    def wait(self, timeout: float) -> list[Any]:
        """Messages that arrive within ``timeout`` seconds ([] if none; check ``eof``)."""
        ready, _, _ = select.select([self.fd], [], [], max(0.0, timeout))
        return self.feed() if ready else []


def peer_uid(sock: socket.socket) -> int:
    """The user id of the process at the other end of a unix socket (``SO_PEERCRED``)."""
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", creds)
    return int(uid)
