"""Serve the web view: uvicorn on a socket of our own, the runner on its loop.

The socket is bound before the server starts, so a port already taken fails
at once with the port's own error, and port 0 (a free port, for tests)
reports the port it got. The runner is opened first, on the event loop the
server then runs on (a store's connections belong to their loop), and
closed when the server stops (Ctrl-C or SIGTERM, which uvicorn handles:
it shuts down, then raises the signal again for whoever handled it before;
here that is a handler that lets the command end normally, status 0).
"""

from __future__ import annotations

import asyncio
import signal
import socket
from collections.abc import Awaitable, Callable, Sequence
from types import FrameType

from stepstone.runner import JobRunner
from stepstone.ui.guard import Access


class CannotServe(RuntimeError):
    """The web view cannot start: the ``ui`` extra (starlette, uvicorn, jinja2)
    is not installed, or the address cannot be listened on."""


def serve_ui(
    open_runner: Callable[[], Awaitable[JobRunner]],
    *,
    host: str,
    port: int,
    refresh: float,
    allow_hosts: Sequence[str] = (),
    access: Access | None = None,
    on_ready: Callable[[str, int], None],
) -> None:
    """Serve until stopped; ``on_ready`` hears the page's URL and port once it
    is served. The view answers the ``Host`` names :func:`stepstone.ui.guard.allowed_hosts`
    gives for ``host`` and ``allow_hosts``; ``access`` says how it knows its
    visitors and whether its pages change runs (:mod:`stepstone.ui.access`)."""
    try:
        import uvicorn

        from stepstone.ui.app import create_app
        from stepstone.ui.guard import allowed_hosts
        from stepstone.ui.sessions import BadSessionKey, Sessions
    except ImportError as exc:
        raise CannotServe(
            f"the web view needs the ui extra: pip install 'stepstone[ui]' ({exc})"
        ) from exc
    try:
        sessions = Sessions.from_environment()
    except BadSessionKey as exc:
        raise CannotServe(str(exc)) from None
    try:
        listening = socket.create_server((host, port), family=_family(host))
    except OSError as exc:
        raise CannotServe(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc

    async def main() -> None:
        runner = await open_runner()
        try:
            app = create_app(
                runner,
                refresh=refresh,
                hosts=allowed_hosts(host, allow_hosts),
                access=access,
                sessions=sessions,
            )
            app.state.finished.start()
            # Forwarded headers are believed only from --trusted-proxy
            # addresses, by the view itself (stepstone.ui.access), never by
            # uvicorn's default (which believes 127.0.0.1).
            config = uvicorn.Config(app, log_level="warning", lifespan="off", proxy_headers=False)
            started = asyncio.Event()

            class Server(uvicorn.Server):
                async def startup(self, sockets: list[socket.socket] | None = None) -> None:
                    await super().startup(sockets)
                    started.set()

            server = Server(config)
            bound = listening.getsockname()[1]

            def stopped(signum: int, frame: FrameType | None) -> None:
                # Before uvicorn takes the signals: stop it as soon as it
                # starts. After: the signal it raises again once shut down.
                server.should_exit = True

            before = {sig: signal.signal(sig, stopped) for sig in STOP_SIGNALS}
            try:
                serving = asyncio.create_task(server.serve(sockets=[listening]))
                # Ready once uvicorn has taken the stop signals.
                waiting = asyncio.create_task(started.wait())
                await asyncio.wait([serving, waiting], return_when=asyncio.FIRST_COMPLETED)
                waiting.cancel()
                if server.started and not server.should_exit:
                    on_ready(f"http://{_url_host(host)}:{bound}/", bound)
                await serving
            finally:
                for sig, handler in before.items():
                    signal.signal(sig, handler)
                await app.state.finished.close()
        finally:
            await runner.close()

    try:
        asyncio.run(main())
    finally:
        listening.close()


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _url_host(host: str) -> str:
    """The host part of the view's URL: a name to browse to even when bound to every address."""
    if host in ("", "0.0.0.0"):
        return "127.0.0.1"
    if host == "::":
        return "[::1]"
    return f"[{host}]" if ":" in host else host


def _family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET
