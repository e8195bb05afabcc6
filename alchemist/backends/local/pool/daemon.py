"""The pool's daemon: ``python -m alchemist.backends.local.pool.daemon POOL_DIR``.

Started (in a session of its own, so it outlives the kernel) by the supervisor of a
user's first local job, with the fingerprint's parts on stdin. It starts the zygote,
opens the rendezvous store on loopback, listens on ``pool.sock`` (accepting only its
own user's processes: the folder is 0700 and each peer's uid is checked), and then:

- ``{"op": "run", "job_id", "attempt", "job_root", "cwd", "log", "ranks": [ENV, ...]}``
  (and ``"entry": "session"`` for a session's engines) from a supervisor: the zygote
  forks the ranks, each with ``MASTER_ADDR``/``MASTER_PORT`` of the store and a key
  prefix of its own (``job/<id>/attempt-<n>``: no process group
  crosses jobs or attempts); the supervisor hears ``{"event": "started", "pids"}``, then
  ``{"event": "exit", "rank", "status"}`` for each rank;
- ``{"op": "stop"}``: the daemon ends; ``{"op": "status"}``: its :class:`PoolInfo`.

It ends after the keep-alive with no job, when told to, or when its zygote is gone.
Ranks that still run then go on: they are in sessions of their own, and their
supervisors watch them by pid.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from alchemist.backends.local.pool import fingerprint, learn, state
from alchemist.backends.local.pool.protocol import Lines, encode, peer_uid
from alchemist.job.jobdir import atomic_write_json

#: How long the zygote may take to import everything before the pool gives up.
ZYGOTE_START_S = 180.0


@dataclass
class _Job:
    conn: socket.socket | None
    job_id: str
    pids: dict[int, int] = field(default_factory=dict)  # pid -> rank


class Daemon:
    def __init__(self, folder: Path, parts: dict[str, str]) -> None:
        self.folder = folder
        self.info = state.PoolInfo(
            pid=os.getpid(),
            status="starting",
            fingerprint=fingerprint.digest(parts),
            started=time.time(),
            keepalive=state.keepalive_s(),
            executable=sys.executable,
            parts=parts,
        )
        self.jobs: dict[str, _Job] = {}  # tag -> job
        self.by_pid: dict[int, str] = {}  # pid -> tag
        self.stopping = False
        self.sel = selectors.DefaultSelector()
        self.store: Any = None
        self.port = 0
        self.next: subprocess.Popen[bytes] | None = None  # a zygote being prepared
        self.next_preload: list[str] = []
        self.next_ready = False
        self.learned_mtime = 0.0

    # -- state -------------------------------------------------------------------------

    def publish(self) -> None:
        running = [j for j in self.jobs.values() if j.pids]
        self.info.jobs = sorted({j.job_id for j in running})
        self.info.ranks = sum(len(j.pids) for j in running)
        if not running and self.info.idle_since is None:
            self.info.idle_since = time.time()
        elif running:
            self.info.idle_since = None
        atomic_write_json(state.state_path(self.folder), asdict(self.info))

    # -- start -------------------------------------------------------------------------

    def _spawn_zygote(self, preload: list[str]) -> subprocess.Popen[bytes]:
        """A zygote importing what every zygote does and ``preload`` (learned)."""
        log = open(self.folder / "zygote.log", "ab")  # noqa: SIM115 - the child's
        env = {
            **os.environ,
            "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
            learn.LEARNED_VAR: ",".join(preload),
        }
        try:
            zygote = subprocess.Popen(
                [sys.executable, "-m", "alchemist.backends.local.pool.zygote"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                cwd=self.folder,
                env=env,
                close_fds=True,
            )
        finally:
            log.close()
        assert zygote.stdin is not None and zygote.stdout is not None
        return zygote

    def start(self) -> None:
        self.publish()
        # What earlier jobs imported, preloaded from the start; a learned package that
        # starts threads is marked unsafe and the zygote started again without it.
        for _ in range(3):
            preload = learn.learned(self.folder)
            self.zygote = self._spawn_zygote(preload)
            assert self.zygote.stdout is not None
            if self.store is None:  # the store, while the zygote imports (a second or two)
                from alchemist.backends.launch import loopback_store

                self.store, self.port = loopback_store(0)
            self.zlines = Lines(self.zygote.stdout.fileno())
            deadline = time.time() + ZYGOTE_START_S
            while time.time() < deadline and not self.zlines.eof:
                for msg in self.zlines.wait(deadline - time.time()):
                    if msg.get("ready"):
                        print(f"[pool] zygote {msg['pid']} ready: {json.dumps(msg)}", flush=True)
                        self.info.preloaded = preload
                        return self._listen()
                    if "unsafe" in msg:
                        learn.mark_unsafe(self.folder, [msg["unsafe"]])
                        print(f"[pool] not preloaded again: {msg['error']}", flush=True)
                        deadline = 0.0
                        break
                    if "error" in msg:
                        raise SystemExit(f"[pool] the zygote failed: {msg['error']}")
            if deadline:
                break
            self.zygote.wait()
        raise SystemExit("[pool] the zygote did not become ready (see zygote.log)")

    # -- learning what to preload (alchemist.backends.local.pool.learn) ----------------

    def _maybe_relearn(self) -> None:
        """While idle: start a zygote that preloads what jobs imported since, if that
        adds anything; it swaps in when ready and no rank runs."""
        if self.next is not None or self.by_pid:
            return
        try:
            mtime = (self.folder / learn.LEARNED_FILE).stat().st_mtime
        except OSError:
            return
        if mtime == self.learned_mtime:
            return
        self.learned_mtime = mtime
        want = learn.learned(self.folder)
        if not set(want) - set(self.info.preloaded):
            return
        print(f"[pool] preparing a zygote that also preloads {', '.join(want)}", flush=True)
        self.next = self._spawn_zygote(want)
        self.next_preload = want
        assert self.next.stdout is not None
        self.next_lines = Lines(self.next.stdout.fileno())
        self.next_ready = False
        self.sel.register(self.next.stdout, selectors.EVENT_READ, ("next", None))

    def _from_next(self) -> None:
        for msg in self.next_lines.feed():
            if msg.get("ready") and not msg.get("cuda_initialized"):
                self.next_ready = True
            elif msg.get("ready") or "error" in msg:
                bad = [msg["unsafe"]] if "unsafe" in msg else self.next_preload
                learn.mark_unsafe(self.folder, bad)
                print(f"[pool] not preloaded: {msg.get('error') or 'CUDA'} ({bad})", flush=True)
                self._drop_next()
                return
        if self.next_lines.eof:
            self._drop_next()

    def _swap(self) -> None:
        """The prepared zygote serves from now on; the old one ends (no rank runs)."""
        assert self.next is not None and self.next.stdout is not None
        old = self.zygote
        assert old.stdout is not None and old.stdin is not None
        self.sel.unregister(old.stdout)
        self.sel.unregister(self.next.stdout)
        old.stdin.close()
        self.zygote, self.zlines = self.next, self.next_lines
        self.sel.register(self.zygote.stdout, selectors.EVENT_READ, ("zygote", None))  # type: ignore[arg-type]
        self.info.preloaded = self.next_preload
        self.next = None
        print(f"[pool] now preloading {', '.join(self.info.preloaded)}", flush=True)
        self.publish()
        try:
            old.wait(timeout=10)
        except subprocess.TimeoutExpired:
            old.kill()

    def _drop_next(self) -> None:
        if self.next is None:
            return
        assert self.next.stdout is not None and self.next.stdin is not None
        with contextlib.suppress(KeyError, ValueError):
            self.sel.unregister(self.next.stdout)
        self.next.stdin.close()
        try:
            self.next.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.next.kill()
        self.next = None

    def _listen(self) -> None:
        path = state.socket_path(self.folder)
        path.unlink(missing_ok=True)
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o077)
        try:
            self.server.bind(str(path))
        finally:
            os.umask(old)
        self.server.listen(64)
        self.server.setblocking(False)
        self.sel.register(self.server, selectors.EVENT_READ, ("accept", None))
        assert self.zygote.stdout is not None
        self.sel.register(self.zygote.stdout, selectors.EVENT_READ, ("zygote", None))
        self.info.status = "ready"
        self.info.ready = self.info.idle_since = time.time()  # idle from now, not from start
        self.publish()

    # -- loop --------------------------------------------------------------------------

    def run(self) -> None:
        while not self.stopping:
            for key, _ in self.sel.select(timeout=0.5):
                kind, data = key.data
                if kind == "accept":
                    self._accept()
                elif kind == "zygote":
                    self._from_zygote()
                elif kind == "next":
                    self._from_next()
                else:
                    self._from_client(key.fileobj, data)  # type: ignore[arg-type]
            self._maybe_relearn()
            if self.next is not None and self.next_ready and not self.by_pid:
                self._swap()
            idle = self.info.idle_since
            if not self.by_pid and idle is not None and time.time() - idle > self.info.keepalive:
                print(f"[pool] idle for {self.info.keepalive:g} s: stopping", flush=True)
                self.stopping = True

    def _accept(self) -> None:
        try:
            conn, _ = self.server.accept()
        except BlockingIOError:
            return
        if peer_uid(conn) != os.getuid():
            conn.close()  # another account's process: the pool is this user's alone
            return
        conn.setblocking(True)
        self.sel.register(conn, selectors.EVENT_READ, ("client", Lines(conn.fileno())))

    def _drop(self, conn: socket.socket) -> None:
        self.sel.unregister(conn)
        conn.close()
        for job in self.jobs.values():
            if job.conn is conn:
                job.conn = None  # its ranks go on; their exits are no one's news now

    def _reply(self, conn: socket.socket | None, obj: dict[str, Any]) -> None:
        if conn is None:
            return
        try:
            conn.sendall(encode(obj))
        except OSError:
            self._drop(conn)

    def _from_client(self, conn: socket.socket, lines: Lines) -> None:
        try:
            msgs = lines.feed()
        except OSError:
            msgs = []
            lines.eof = True
        for msg in msgs:
            op = msg.get("op")
            if op == "run":
                self._run(conn, msg)
            elif op == "status":
                self._reply(conn, {"event": "status", "info": self.info.to_dict()})
            elif op == "stop":
                self.stopping = True
                self._reply(conn, {"event": "stopping"})
        if lines.eof:
            self._drop(conn)

    def _run(self, conn: socket.socket, msg: dict[str, Any]) -> None:
        tag = f"{msg['job_id']}/{msg['attempt']}"
        prefix = f"job/{msg['job_id']}/attempt-{msg['attempt']}"
        ranks = [
            {
                **env,
                "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": str(self.port),
                "ALCHEMIST_STORE_PREFIX": prefix,
            }
            for env in msg["ranks"]
        ]
        self.jobs[tag] = _Job(conn=conn, job_id=msg["job_id"])
        assert self.zygote.stdin is not None
        request = {k: msg[k] for k in ("job_root", "cwd", "log", "entry") if k in msg}
        self.zygote.stdin.write(encode({"op": "fork", "tag": tag, "ranks": ranks, **request}))
        self.zygote.stdin.flush()

    def _from_zygote(self) -> None:
        for msg in self.zlines.feed():
            if "forked" in msg:
                job = self.jobs[msg["forked"]]
                job.pids = {pid: rank for rank, pid in enumerate(msg["pids"])}
                for pid in msg["pids"]:
                    self.by_pid[pid] = msg["forked"]
                self.info.served += 1
                self._reply(job.conn, {"event": "started", "pids": msg["pids"]})
                self.publish()
            elif "exit" in msg:
                tag = self.by_pid.pop(msg["exit"], None)
                if tag is None:
                    continue
                job = self.jobs[tag]
                rank = job.pids.pop(msg["exit"])
                self._reply(job.conn, {"event": "exit", "rank": rank, "status": msg["status"]})
                if not job.pids:
                    if job.conn is not None:
                        self._drop(job.conn)
                    del self.jobs[tag]
                self.publish()
            elif "error" in msg:
                job_ = self.jobs.get(msg.get("tag", ""))
                self._reply(
                    job_.conn if job_ else None, {"event": "error", "message": msg["error"]}
                )
                print(f"[pool] the zygote cannot serve: {msg['error']}", flush=True)
                self.stopping = True
        if self.zlines.eof:
            print("[pool] the zygote is gone: stopping", flush=True)
            self.stopping = True

    # -- stop --------------------------------------------------------------------------

    def close(self) -> None:
        # The state first: whoever reads it after this sees no pool.
        state.state_path(self.folder).unlink(missing_ok=True)
        state.socket_path(self.folder).unlink(missing_ok=True)
        self._drop_next()
        zygote = getattr(self, "zygote", None)
        if zygote is not None:
            if zygote.stdin is not None:
                zygote.stdin.close()  # the zygote ends at EOF; its ranks go on
            try:
                zygote.wait(timeout=10)
            except subprocess.TimeoutExpired:
                zygote.kill()


def main(argv: list[str]) -> int:
    folder = Path(argv[0])
    parts = json.loads(sys.stdin.read() or "{}")
    daemon = Daemon(folder, parts)

    def on_term(signum: int, frame: FrameType | None) -> None:
        daemon.stopping = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        daemon.start()
        daemon.run()
    finally:
        daemon.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
