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
from collections.abc import Awaitable, Callable
from types import FrameType

from stepstone.runner import JobRunner


class CannotServe(RuntimeError):
    """The web view cannot start: the ``ui`` extra (starlette, uvicorn, jinja2)
    is not installed, or the address cannot be listened on."""


def serve_ui(
    open_runner: Callable[[], Awaitable[JobRunner]],
    *,
    host: str,
    port: int,
    refresh: float,
    on_ready: Callable[[str], None],
) -> None:
    """Serve until stopped; ``on_ready`` hears the page's URL once it is served."""
    try:
        import uvicorn

        from stepstone.ui.app import create_app
    except ImportError as exc:
        raise CannotServe(
            f"the web view needs the ui extra: pip install 'stepstone[ui]' ({exc})"
        ) from exc
    try:
        listening = socket.create_server((host, port), family=_family(host))
    except OSError as exc:
        raise CannotServe(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc

    async def main() -> None:
        runner = await open_runner()
        try:
            config = uvicorn.Config(
                create_app(runner, refresh=refresh), log_level="warning", lifespan="off"
            )
            server = uvicorn.Server(config)
            bound = listening.getsockname()[1]
            on_ready(f"http://{f'[{host}]' if ':' in host else host}:{bound}/")
            before = {sig: signal.signal(sig, _stopped) for sig in STOP_SIGNALS}
            try:
                await server.serve(sockets=[listening])
            finally:
                for sig, handler in before.items():
                    signal.signal(sig, handler)
        finally:
            await runner.close()

    try:
        asyncio.run(main())
    finally:
        listening.close()


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _stopped(signum: int, frame: FrameType | None) -> None:
    """The signal uvicorn raises again once it has shut down: already handled."""


def _family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET
