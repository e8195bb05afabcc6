"""The parameter server's accept loop cannot be stalled by a client.

Everything is real: the ``ParameterServer`` and its client class ``ServerConnection``
over real TCP sockets on 127.0.0.1, raw sockets for the clients that misbehave, and, in
the last test, two real gloo ranks (spawned processes) training with ``async`` against
rank 0's server. No stand-in.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from multiprocessing import AuthenticationError
from multiprocessing.connection import Client
from pathlib import Path
from typing import Any

import pytest
import torch
from algo_harness import RankCtx, ok, run_ranks, train_digits

from alchemist.runtime.algorithms import _ps, async_ps

NUMEL = 3


class CountingServer(_ps.ParameterServer):
    """Answers every request with the number of requests served so far."""

    numel = NUMEL

    def handle(self, header: dict[str, Any], payload: torch.Tensor) -> bytes:
        self.version += 1
        return _ps.encode({"version": self.version})


@pytest.fixture
def make_server() -> Iterator[Callable[..., CountingServer]]:
    """``make_server(**options)``: a server for two workers, closed after the test."""
    made: list[CountingServer] = []

    def make(**options: Any) -> CountingServer:
        made.append(CountingServer(2, "127.0.0.1", **options))
        return made[-1]

    yield make
    for ps in made:
        ps.close()


def connect_within(ps: CountingServer, rank: int, seconds: float) -> _ps.ServerConnection:
    """A real worker connection, made in a thread so that a stalled server fails the
    test after ``seconds`` instead of hanging it."""
    result: dict[str, Any] = {}

    def target() -> None:
        try:
            result["conn"] = _ps.ServerConnection(
                ("127.0.0.1", ps.port), ps.authkey, rank, NUMEL, timeout=10
            )
        except BaseException as e:
            result["error"] = e

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"rank {rank} could not connect within {seconds} s: server stalled"
    assert "error" not in result, result.get("error")
    conn: _ps.ServerConnection = result["conn"]
    return conn


def still_open(sock: socket.socket) -> bool:
    """True while the peer has not closed ``sock`` (what it already sent is drained)."""
    sock.setblocking(False)
    try:
        while True:
            if sock.recv(4096) == b"":
                return False
    except BlockingIOError:
        return True
    finally:
        sock.setblocking(True)


def test_an_idle_client_does_not_stall_the_workers(
    make_server: Callable[..., CountingServer],
) -> None:
    """A client connects first and sends nothing; both workers still connect, work and
    finish while it sits there, and it is never counted as a worker."""
    server = make_server()
    idle = socket.create_connection(("127.0.0.1", server.port))
    try:
        workers = [connect_within(server, rank, 10) for rank in (0, 1)]
        for w in workers:
            header, _ = w.request({"op": "push"})
            assert header["version"] >= 1
            w.request({"op": "done"})
        assert server.wait_finished(10)
        assert server.done == {0, 1} and server.lost == set()
        assert still_open(idle), "the idle client was dropped early: this test proved nothing"
        for w in workers:
            w.close()
    finally:
        idle.close()


def test_a_client_that_stalls_the_handshake_is_dropped(
    make_server: Callable[..., CountingServer],
) -> None:
    server = make_server(auth_timeout=0.5)
    idle = socket.create_connection(("127.0.0.1", server.port))
    try:
        deadline = time.monotonic() + 10
        while still_open(idle):
            assert time.monotonic() < deadline, "the server never dropped the idle client"
            time.sleep(0.05)
    finally:
        idle.close()
    assert server.done == set() and server.lost == set()
    worker = connect_within(server, 0, 10)  # and the server still serves
    assert worker.request({"op": "push"})[0]["version"] == 1
    worker.request({"op": "done"})
    worker.close()


def test_a_wrong_key_is_refused_and_the_server_keeps_serving(
    make_server: Callable[..., CountingServer],
) -> None:
    server = make_server()
    with pytest.raises(AuthenticationError):
        Client(("127.0.0.1", server.port), authkey=b"not the job's key" * 2)
    worker = connect_within(server, 1, 10)
    assert worker.request({"op": "push"})[0]["version"] == 1
    worker.request({"op": "done"})
    worker.close()
    deadline = time.monotonic() + 10
    while server.done != {1}:
        assert time.monotonic() < deadline, (server.done, server.lost)
        time.sleep(0.02)
    assert server.lost == set()


# -- real ranks ----------------------------------------------------------------------------


class MisbehavedFirst(async_ps.AsyncServer):
    """Rank 0's ``async`` server, and before any worker reaches it: an idle client that
    connects and sends nothing, and a client with the wrong key."""

    AUTH_TIMEOUT_S = 600.0  # the idle client stays connected for the whole training
    last: MisbehavedFirst | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.idle = socket.create_connection(("127.0.0.1", self.port))
        try:
            Client(("127.0.0.1", self.port), authkey=b"x" * 32)
            self.wrong_key = "accepted"
        except AuthenticationError:
            self.wrong_key = "refused"
        MisbehavedFirst.last = self


def idle_client_worker(ctx: RankCtx, data: Path) -> dict[str, Any]:
    async_ps.AsyncServer = MisbehavedFirst  # type: ignore[misc]
    result = train_digits(ctx, "async", data, epochs=3, lr=0.05, log_every=0)
    server = MisbehavedFirst.last
    if server is not None:  # rank 0
        result.update(
            done=sorted(server.done),
            lost=sorted(server.lost),
            wrong_key=server.wrong_key,
            idle_open=still_open(server.idle),
        )
        server.idle.close()
    return result


def test_async_ranks_train_while_an_idle_client_holds_a_connection(
    tmp_path: Path, digits_path: Path
) -> None:
    """Two real ranks train the digits classifier with ``async`` although an idle client
    and a wrong-key client reached rank 0's server before either worker did."""
    first, second = ok(run_ranks(idle_client_worker, 2, tmp_path, digits_path, timeout=120))
    assert first["wrong_key"] == "refused"
    assert first["idle_open"], "the idle client was dropped early: this test proved nothing"
    assert first["done"] == [0, 1] and first["lost"] == []
    assert first["steps"] > 0 and second["steps"] > 0
    assert first["accuracy"] >= 0.6, first  # it learned (chance is 0.1)
