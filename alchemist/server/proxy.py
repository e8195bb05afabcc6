"""What this server forwards to other processes: a job's TensorBoard, and only the
user's own loopback ports.

**``<base_url>alchemist/tensorboard/<job_id>/...``**: a job's TensorBoard.

TensorBoard listens on a unix socket in its owner's private runtime folder
(:mod:`alchemist.tensorboard`); this route forwards the browser's requests there. It is
jupyter-server-proxy's own proxy (its ``LocalProxyHandler``: header handling,
streaming, redirects rewritten under this route) with the target chosen here, so a
request reaches a TensorBoard only when this server's user is logged in (Jupyter's
authentication, checked before anything is forwarded) and only the TensorBoard this
user's own Alchemist home records for that job: no port to take first, nothing another
account can listen on, and a link shared with another user opens that user's own
TensorBoard of that job id, if any.

**``<base_url>proxy/<port>/...``** (jupyter-server-proxy, a dependency of Alchemist)
forwards to any loopback port, whoever listens there: another account of the machine
that listens on a port, or takes one first, has its page served in this user's
JupyterLab origin, where a script can start a kernel as this user; a
``/hub/user-redirect/proxy/<port>/`` link does it to whoever clicks it. This extension
(loaded before jupyter-server-proxy: extensions load in name order) puts its own
handler on those routes, the same proxy that first checks, in the kernel's socket
tables (``/proc/net/tcp``, ``tcp6``), that every loopback listener on that port belongs
to this server's account (:func:`port_owned_by_me`); ``proxy/localhost:<port>`` and
``proxy/127.0.0.1:<port>`` get the same check through jupyter-server-proxy's
``host_allowlist`` unless the deployment set one.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from jupyter_server.utils import url_path_join
from jupyter_server_proxy.handlers import LocalProxyHandler
from tornado import web

#: The kernel's TCP socket tables; a row: ``sl local rem st ... uid ...``.
_TCP_TABLES = (Path("/proc/net/tcp"), Path("/proc/net/tcp6"))
_LISTEN = "0A"
_LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1", "[::1]")


def _loopback(hex_addr: str) -> bool:
    if len(hex_addr) == 8:  # IPv4, little-endian bytes: 127.x.x.x ends in 7F
        return hex_addr[6:8] == "7F"
    return (
        hex_addr
        in (
            "00000000000000000000000001000000",  # ::1
        )
        or (hex_addr.startswith("0000000000000000FFFF0000") and hex_addr[30:32] == "7F")
    )


def loopback_listeners(port: int) -> list[int]:
    """The uids of the sockets listening on loopback port ``port`` (or on every
    address, which loopback reaches too), from the kernel's tables."""
    uids = []
    for table in _TCP_TABLES:
        try:
            rows = table.read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if len(fields) < 8 or fields[3] != _LISTEN:
                continue
            addr, _, hex_port = fields[1].partition(":")
            if int(hex_port, 16) != port:
                continue
            if _loopback(addr) or set(addr) == {"0"}:
                uids.append(int(fields[7]))
    return uids


def port_owned_by_me(port: int) -> bool:
    """Whether something listens on loopback ``port`` and all of it is this account's."""
    uids = loopback_listeners(port)
    return bool(uids) and all(uid == os.getuid() for uid in uids)


def _refuse_port(port: int) -> web.HTTPError:
    return web.HTTPError(
        403,
        f"port {port} is not served by a process of this account: this server forwards"
        " only to your own programs",
    )


class OwnPortProxyHandler(LocalProxyHandler):
    """jupyter-server-proxy's ``proxy/<port>`` that forwards only to this account's
    listeners."""

    def proxy(self, port: Any, proxied_path: str) -> Any:
        if not port_owned_by_me(int(port)):
            raise _refuse_port(int(port))
        return super().proxy(port, proxied_path)

    async def open(self, port: Any, proxied_path: str) -> Any:
        if not port_owned_by_me(int(port)):
            raise _refuse_port(int(port))
        return await super().open(port, proxied_path)


def own_loopback_host(handler: Any, host: str) -> bool:
    """jupyter-server-proxy's ``host_allowlist``: a loopback host, on a port of ours."""
    if host not in _LOOPBACK_HOSTS:
        return False
    args = getattr(handler, "path_args", None) or []
    try:
        return port_owned_by_me(int(args[1]))
    except (IndexError, TypeError, ValueError):
        return False


#: Job ids as the job index makes them (the REST API's route pattern).
_JOB_ID = r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}"


class TensorBoardProxyHandler(LocalProxyHandler):
    """Forwards to the requesting user's TensorBoard of ``job_id``; 404 when none runs."""

    def _target(self, job_id: str) -> None:
        from alchemist.tensorboard import ROUTE, serving_socket

        sock = serving_socket(job_id)
        if sock is None:
            raise web.HTTPError(  # the reason: Jupyter's 404 page shows no message
                404,
                reason=f"no TensorBoard runs for job {job_id}: open it from the job's"
                f" monitor, the panel, %alchemist_tensorboard {job_id}, or POST"
                f" alchemist/api/v1/jobs/{job_id}/tensorboard",
            )
        self.unix_socket = sock
        self.proxy_base = url_path_join(ROUTE, job_id)

    async def http_get(self, job_id: str, proxied_path: str) -> Any:
        self._target(job_id)
        return await self.proxy(0, proxied_path or "/")

    async def open(self, job_id: str, proxied_path: str) -> Any:
        raise web.HTTPError(404, "TensorBoard serves no websockets")

    def post(self, job_id: str, proxied_path: str) -> Any:
        self._target(job_id)
        return self.proxy(0, proxied_path or "/")

    def head(self, job_id: str, proxied_path: str) -> Any:
        self._target(job_id)
        return self.proxy(0, proxied_path or "/")

    def put(self, job_id: str, proxied_path: str) -> Any:
        raise web.HTTPError(405)

    def delete(self, job_id: str, proxied_path: str) -> Any:
        raise web.HTTPError(405)

    def patch(self, job_id: str, proxied_path: str) -> Any:
        raise web.HTTPError(405)

    def options(self, job_id: str, proxied_path: str) -> Any:
        raise web.HTTPError(405)


def setup_proxy_routes(serverapp: Any) -> None:
    """Add the TensorBoard route and the own-port guard to a Jupyter server (before
    jupyter-server-proxy loads: see the module)."""
    from alchemist.tensorboard import ROUTE

    web_app = serverapp.web_app
    base_url = web_app.settings.get("base_url", "/")
    tensorboard = f"{re.escape(url_path_join(base_url, ROUTE))}/({_JOB_ID})(/.*|)$"
    ports = url_path_join(base_url, r"/proxy/(\d+)(/.*|)")
    web_app.add_handlers(
        ".*$",
        [
            (tensorboard, TensorBoardProxyHandler),
            (ports, OwnPortProxyHandler, {"absolute_url": False}),
        ],
    )
    proxy_config = serverapp.config.ServerProxy
    if "host_allowlist" not in proxy_config and "host_whitelist" not in proxy_config:
        proxy_config.host_allowlist = own_loopback_host
