"""A TCP forwarder in front of a real server, to switch it off and on: a store outage.

While it runs, connections to ``port`` reach the target; ``stop()`` closes the
listening socket and drops every connection, so clients get a refused or reset
connection, as when S3 cannot be reached; ``start()`` listens on the same port
again. Nothing about the protocol is faked: the bytes pass through unchanged.
"""

from __future__ import annotations

import contextlib
import socket
import threading


class OutageProxy:
    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.port = 0
        self._server: socket.socket | None = None
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        """Listen (on the port of the last start, if there was one) and forward."""
        self._server = socket.create_server(("127.0.0.1", self.port))  # SO_REUSEADDR
        self.port = self._server.getsockname()[1]
        self._spawn(self._accept, self._server)

    def stop(self) -> None:
        """Refuse new connections and drop the open ones."""
        server, self._server = self._server, None
        if server is not None:
            with contextlib.suppress(OSError):
                server.shutdown(socket.SHUT_RDWR)  # wakes the thread blocked in accept
            server.close()
        with self._lock:
            dropped, self._open = self._open, set()
        for sock in dropped:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        for thread in self._threads:
            thread.join(timeout=5)
        self._threads = []

    def _spawn(self, target: object, *args: object) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)  # type: ignore[arg-type]
        self._threads.append(thread)
        thread.start()

    def _accept(self, server: socket.socket) -> None:
        while True:
            try:
                client, _ = server.accept()
            except OSError:
                return  # stopped
            try:
                upstream = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._open |= {client, upstream}
            self._spawn(_pump, client, upstream)
            self._spawn(_pump, upstream, client)


def _pump(source: socket.socket, sink: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := source.recv(65536):
            sink.sendall(data)
    with contextlib.suppress(OSError):
        sink.shutdown(socket.SHUT_WR)
