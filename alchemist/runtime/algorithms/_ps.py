"""A small parameter server for ``async`` and ``easgd``: one TCP connection per worker.

Why not ``torch.distributed.rpc`` or point-to-point on a gloo group: both tie every rank
into one communicator, and a worker that dies makes the others' calls fail or hang
(RPC's graceful shutdown waits for every peer; gloo's receive-from-any-source aborts
when one peer's connection closes). The point of asynchronous training is that the
server keeps going without the lost worker, so each worker gets its own connection:
``multiprocessing.connection`` (standard library, HMAC-authenticated with a key that
rank 0 draws and broadcasts over the job's process group). The accept loop only
accepts: each connection's handshake runs in that connection's own thread under a
deadline, so a client that connects and sends nothing (or the wrong key) is dropped
without ever holding up another worker, and is never counted as one. A request is one
length-prefixed frame; the server acts on a frame only once it has all of it, and
applies each update under one lock, so a worker that crashes mid-send loses its last
update and corrupts nothing.

Placement: the server runs in background threads of ``server_rank`` (rank 0 by default),
which also trains: its own worker talks to the server over the same TCP path as every
other worker. The process group is used once, at start, to broadcast the address.
"""

from __future__ import annotations

import os
import pickle
import secrets
import socket
import struct
import sys
import threading
import time
from multiprocessing import AuthenticationError
from multiprocessing.connection import (
    Client,
    Connection,
    Listener,
    answer_challenge,
    deliver_challenge,
)
from typing import Any

import torch

from alchemist.errors import AlchemistError

_HEADER = struct.Struct("<I")


def encode(header: dict[str, Any], payload: torch.Tensor | None = None) -> bytes:
    """One frame: header length, pickled header, float32 payload bytes."""
    head = pickle.dumps(header, protocol=pickle.HIGHEST_PROTOCOL)
    body = b"" if payload is None else payload.detach().to("cpu", torch.float32).numpy().tobytes()
    return _HEADER.pack(len(head)) + head + body


def decode(frame: bytes) -> tuple[dict[str, Any], torch.Tensor]:
    """The inverse of :func:`encode` (the payload is a fresh float32 vector)."""
    (n,) = _HEADER.unpack_from(frame)
    header = pickle.loads(frame[_HEADER.size : _HEADER.size + n])
    body = bytearray(frame[_HEADER.size + n :])
    payload = torch.frombuffer(body, dtype=torch.float32) if body else torch.zeros(0)
    return header, payload


def no_delay(conn: Connection) -> None:
    """Turn off Nagle's algorithm on ``conn``'s socket.

    ``Connection.send_bytes`` writes the length and a large payload with two ``send``
    calls; with Nagle on, the second waits for the peer's delayed ACK (~40 ms a request).
    """
    s = socket.socket(fileno=os.dup(conn.fileno()))
    try:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    finally:
        s.close()


def _shutdown(conn: Connection) -> None:
    """Shut ``conn``'s socket down both ways: a thread blocked reading it gets EOF at once
    (closing the descriptor alone would not wake it)."""
    try:
        s = socket.socket(fileno=os.dup(conn.fileno()))
    except OSError:
        return  # already closed
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    finally:
        s.close()


class ParameterServer:
    """Serves requests of ``world_size`` workers; subclasses implement :meth:`handle`.

    Contract: :meth:`handle` runs under ``self.lock`` (one request at a time), so every
    update is atomic. ``version`` counts applied updates. A worker is *finished* when it
    sent ``done`` or its connection broke; :meth:`wait_finished` waits for all of them.
    """

    #: Number of parameter elements served; subclasses set it before ``__init__``.
    numel: int = -1

    #: Seconds a new connection has to complete the HMAC handshake before it is dropped.
    AUTH_TIMEOUT_S = 30.0

    def __init__(self, world_size: int, host: str, auth_timeout: float | None = None) -> None:
        self.world_size = world_size
        self.authkey = secrets.token_bytes(32)
        self.auth_timeout = self.AUTH_TIMEOUT_S if auth_timeout is None else auth_timeout
        # No authkey here: Listener.accept() would run the handshake in the accept loop,
        # where one silent client blocks every later one. _serve runs it instead.
        self.listener = Listener((host, 0), backlog=max(16, world_size))
        self.lock = threading.Lock()
        self.version = 0
        self.done: set[int] = set()
        self.lost: set[int] = set()
        self._finished = threading.Condition()
        self._closed = False
        self._threads: list[threading.Thread] = []
        accept = threading.Thread(target=self._accept_loop, name="alchemist-ps-accept", daemon=True)
        accept.start()

    @property
    def port(self) -> int:
        return int(self.listener.address[1])

    def handle(self, header: dict[str, Any], payload: torch.Tensor) -> bytes:
        """Answer one request (called with ``self.lock`` held); return the reply frame."""
        raise NotImplementedError

    def _accept_loop(self) -> None:
        while not self._closed:
            try:
                conn = self.listener.accept()  # plain accept: never waits on a client
            except OSError:
                if self._closed:
                    return
                time.sleep(0.01)  # e.g. out of file descriptors: do not spin
                continue
            t = threading.Thread(target=self._serve, args=(conn,), name="alchemist-ps", daemon=True)
            t.start()
            self._threads = [t for t in self._threads if t.is_alive()] + [t]

    def _authenticate(self, conn: Connection) -> bool:
        """Run the HMAC handshake (both ways, as ``Listener(authkey=...)`` would) within
        ``auth_timeout`` s; False if the client failed it, closed, or stalled."""
        state = {"done": False, "expired": False}
        guard = threading.Lock()

        def expire() -> None:
            with guard:
                if state["done"]:
                    return
                state["expired"] = True
            # Wakes the handshake's blocking read: it ends with EOF.
            _shutdown(conn)

        timer = threading.Timer(self.auth_timeout, expire)
        timer.daemon = True
        timer.start()
        try:
            deliver_challenge(conn, self.authkey)
            answer_challenge(conn, self.authkey)
        except (AuthenticationError, EOFError, OSError):
            return False
        finally:
            timer.cancel()
            # A timer that already fired has shut this socket down before the caller
            # closes it (never a later connection that reuses its descriptor number).
            timer.join()
        with guard:
            state["done"] = True
            return not state["expired"]

    def _serve(self, conn: Connection) -> None:
        rank: int | None = None
        try:
            if not self._authenticate(conn):
                return  # not a worker: dropped before it could send a request
            no_delay(conn)
            while True:
                frame = conn.recv_bytes()
                header, payload = decode(frame)
                op = header.get("op")
                if op == "hello":
                    rank = int(header["rank"])
                    if header.get("numel") != self.numel:
                        conn.send_bytes(
                            encode(
                                {
                                    "error": f"rank {rank} has {header.get('numel')} parameter"
                                    f" elements, the server rank {self.numel}"
                                }
                            )
                        )
                        continue
                    conn.send_bytes(encode({"ok": True}))
                    continue
                if op == "done":
                    # Reply first: once every rank is done the server rank may exit,
                    # and a reply not yet sent would reach this worker as "server gone".
                    conn.send_bytes(encode({"ok": True}))
                    with self._finished:
                        if rank is not None:
                            self.done.add(rank)
                        self._finished.notify_all()
                    continue
                try:
                    with self.lock:
                        reply = self.handle(header, payload)
                except Exception as e:  # a bad request must not kill the server
                    reply = encode({"error": f"{type(e).__name__}: {e}"})
                conn.send_bytes(reply)
        except (EOFError, OSError):
            with self._finished:
                if rank is not None and rank not in self.done:
                    self.lost.add(rank)
                    print(
                        f"[alchemist] parameter server: worker rank {rank} disconnected before"
                        " finishing; its unfinished update was discarded, training goes on",
                        file=sys.stderr,
                        flush=True,
                    )
                self._finished.notify_all()
        finally:
            conn.close()

    def wait_finished(self, timeout: float) -> bool:
        """Wait until every rank is done or lost; False if ``timeout`` passed first."""
        deadline = time.monotonic() + timeout
        with self._finished:
            while len(self.done | self.lost) < self.world_size:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._finished.wait(left)
        return True

    def close(self) -> None:
        self._closed = True
        try:
            self.listener.close()
        except OSError:
            pass


class ServerConnection:
    """A worker's connection to the server: one request, one reply, with a deadline."""

    def __init__(
        self, address: tuple[str, int], authkey: bytes, rank: int, numel: int, timeout: float
    ) -> None:
        self.timeout = timeout
        self.rank = rank
        try:
            self.conn = Client(address, authkey=authkey)
        except OSError as e:
            raise AlchemistError(
                f"cannot reach the parameter server at {address[0]}:{address[1]} ({e});"
                " check that the server rank is alive and its port is reachable"
            ) from e
        no_delay(self.conn)
        self.request({"op": "hello", "rank": rank, "numel": numel})

    def request(
        self, header: dict[str, Any], payload: torch.Tensor | None = None
    ) -> tuple[dict[str, Any], torch.Tensor]:
        """Send a request and return the server's reply.

        Raises:
            AlchemistError: the server is gone, did not answer within ``timeout`` s, or
                refused the request (e.g. a gradient of the wrong size).
        """
        try:
            self.conn.send_bytes(encode(header, payload))
            if not self.conn.poll(self.timeout):
                raise AlchemistError(
                    f"the parameter server did not answer within {self.timeout:.0f} s;"
                    " raise the algorithm option request_timeout if the model is very large"
                )
            reply, reply_payload = decode(self.conn.recv_bytes())
        except (EOFError, OSError) as e:
            raise AlchemistError(
                "the parameter server (on the server rank) is gone, so training cannot go on;"
                " see that rank's log for why it stopped"
            ) from e
        if "error" in reply:
            raise AlchemistError(
                f"the parameter server refused a {header.get('op', 'request')}: {reply['error']};"
                " every rank must wrap the same model and optimizer"
            )
        return reply, reply_payload

    def close(self) -> None:
        self.conn.close()


def advertised_host() -> tuple[str, str]:
    """(bind host, host other ranks connect to) for a server on this process's node.

    ``MASTER_ADDR`` (set by torchrun, and the rank-0 pod's address on Kubernetes) is the
    address other nodes already use to reach this node; on loopback we bind loopback only.
    """
    master = os.environ.get("MASTER_ADDR", "127.0.0.1")
    if master in ("127.0.0.1", "localhost", "::1"):
        return "127.0.0.1", "127.0.0.1"
    return "0.0.0.0", master


def start(
    server_factory: Any, ctx: Any, server_rank: int, numel: int, timeout: float
) -> tuple[Any, ServerConnection]:
    """Start the server on ``server_rank`` and connect this rank to it.

    Collective: every rank must call it (it broadcasts the address over the job's
    process group). Returns ``(server or None, connection)``.

    Raises:
        AlchemistError: on every rank, when any rank cannot join (unreachable server,
            a model of another size); the message names the rank and the reason.
    """
    import torch.distributed as dist

    server = None
    info: list[Any] = [None]
    if ctx.rank == server_rank:
        bind, host = advertised_host()
        server = server_factory(bind)
        info = [(host, server.port, server.authkey)]
    dist.broadcast_object_list(info, src=server_rank)
    host, port, authkey = info[0]
    conn, error = None, None
    try:
        conn = ServerConnection((host, port), authkey, ctx.rank, numel, timeout)
    except AlchemistError as e:
        error = str(e)
    # Fail together: a rank left waiting for a refused one would hang in a collective.
    errors: list[Any] = [None] * ctx.world_size
    dist.all_gather_object(errors, error)
    failed = [(r, e) for r, e in enumerate(errors) if e]
    if failed:
        if conn is not None:
            conn.close()
        if server is not None:
            server.close()
        rank, message = next(((r, e) for r, e in failed if r == ctx.rank), failed[0])
        if rank != ctx.rank:
            message = f"rank {rank} could not join the parameter server: {message}"
        raise AlchemistError(message)
    assert conn is not None
    return server, conn
