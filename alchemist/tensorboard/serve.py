"""The TensorBoard process of one job: TensorBoard's app on a unix socket, ended when idle.

``python -m alchemist.tensorboard.serve LOGDIR SOCKET IDLE_S`` serves TensorBoard's WSGI
app (``tensorboard.program``, every default plugin) on the unix socket ``SOCKET``, in
the account's private runtime folder, instead of a TCP port: a loopback port can be
read by every account of the machine, taken by one before TensorBoard binds it, and
forwarded by the user's own Jupyter server to whoever listens there
(jupyter-server-proxy's ``/proxy/<port>/``). The socket is reached only through the
owner's authenticated Jupyter server (:mod:`alchemist.server.tensorboard`). The process
ends once no request has come for ``IDLE_S`` seconds (the next open starts another).
It loads the event files itself (``--load_fast=false``): TensorBoard's faster loader is a
second process that serves them on a loopback TCP port.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

#: How often the idle clock is read (seconds).
IDLE_CHECK_S = 5.0


def serve(logdir: str, sock: Path, idle_s: float) -> int:
    from tensorboard import default, program
    from werkzeug import serving

    last = [time.monotonic()]

    class UnixSocketServer(program.TensorBoardServer):
        def __init__(self, wsgi_app: Any, flags: Any) -> None:
            def app(environ: dict[str, Any], start_response: Any) -> Any:
                last[0] = time.monotonic()
                return wsgi_app(environ, start_response)

            sock.unlink(missing_ok=True)  # one left by a server that was killed
            self._server = serving.make_server(f"unix://{sock}", 0, app, threaded=True)
            os.chmod(sock, 0o600)

        def serve_forever(self) -> None:
            self._server.serve_forever()

        def get_url(self) -> str:
            return f"unix://{sock}"

        def print_serving_message(self) -> None:
            print(f"TensorBoard serving {logdir} on {sock}", flush=True)

    class TensorBoard(program.TensorBoard):
        def _register_info(self, server: Any) -> None:
            """Not written: TensorBoard's info files (for ``tensorboard.notebook``) live
            in the shared temporary directory and name a TCP port; this one has none."""

    def watch_idle() -> None:
        while time.monotonic() - last[0] < idle_s:
            time.sleep(min(IDLE_CHECK_S, idle_s))
        print(f"TensorBoard idle for {idle_s:g} s: stopped", flush=True)
        sock.unlink(missing_ok=True)
        os._exit(0)

    threading.Thread(target=watch_idle, name="alchemist-tb-idle", daemon=True).start()
    tb = TensorBoard(plugins=default.get_plugins(), server_class=UnixSocketServer)
    # --load_fast=false: no tensorboard-data-server, which would serve the event data
    # over gRPC on a loopback port, open to every account of the machine.
    tb.configure(argv=[None, "--logdir", logdir, "--reload_interval", "2", "--load_fast", "false"])
    try:
        return int(tb.main())
    finally:
        sock.unlink(missing_ok=True)


if __name__ == "__main__":
    sys.exit(serve(sys.argv[1], Path(sys.argv[2]), float(sys.argv[3])))
