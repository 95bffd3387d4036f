"""A streaming POST that yields server-sent events, on the standard library only.

Why not a client library: none is in the lock, and the two things the engine needs are easier
with the socket in hand: a stall is a read that outlasts ``timeout`` (the socket timeout), and a
cancel from another thread must unblock a read at once (``shutdown`` of the socket, which also
tells the server to stop generating). A reader thread turns lines into a queue so the decode loop
can wait on it in short slices.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import queue
import socket
import threading
import time
from typing import Any
from urllib.parse import urlsplit

from bolt_agent.core.llm.types import EngineError


class RemoteError(EngineError):
    """The server refused, dropped the stream or stalled; ``kind`` says which (for fallback)."""

    def __init__(self, kind: str, message: str):
        super().__init__(f"{kind}: {message}")
        self.kind = kind  # refused | http | dropped | stalled


_END = object()


def _connection(url: str, timeout: float) -> tuple[http.client.HTTPConnection, str]:
    parts = urlsplit(url)
    cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    path = parts.path + (f"?{parts.query}" if parts.query else "")
    return cls(parts.hostname or "localhost", parts.port, timeout=timeout), path


def request_json(
    url: str, body: dict | None, headers: dict[str, str], timeout: float
) -> dict[str, Any]:
    """One non-streaming request (GET when ``body`` is None); JSON answer or ``RemoteError``."""
    conn, path = _connection(url, timeout)
    try:
        data = None if body is None else json.dumps(body).encode()
        hdrs = {**headers, "Content-Type": "application/json"}
        conn.request("GET" if body is None else "POST", path, body=data, headers=hdrs)
        resp = conn.getresponse()
        raw = resp.read()
    except (ConnectionError, socket.gaierror) as exc:
        raise RemoteError("refused", f"{url}: {exc}") from exc
    except TimeoutError as exc:
        raise RemoteError("stalled", f"{url}: no answer within {timeout:.1f}s") from exc
    except (OSError, http.client.HTTPException) as exc:
        raise RemoteError("dropped", f"{url}: {exc}") from exc
    finally:
        conn.close()
    if resp.status != 200:
        raise RemoteError("http", f"{url}: HTTP {resp.status} {raw[:300]!r}")
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise RemoteError("http", f"{url}: not JSON: {raw[:200]!r}") from exc


class SseStream:
    """``POST url`` with a JSON body; ``next_event(poll)`` returns parsed ``data:`` objects.

    ``next_event`` returns ``None`` when ``poll`` seconds pass without an event (the caller checks
    its cancel token and asks again) and raises ``StopIteration`` after ``[DONE]``. A refused
    connection, an HTTP error, a stream that ends without ``[DONE]`` and a read that outlasts
    ``timeout`` raise ``RemoteError``. ``close()`` is safe from any thread.
    """

    def __init__(self, url: str, body: dict, headers: dict[str, str], timeout: float):
        self.url = url
        self.timeout = timeout
        self.sent_at = time.monotonic()
        self._conn, path = _connection(url, timeout)
        self._queue: queue.Queue = queue.Queue()
        self._closed = threading.Event()
        self._finished = False
        data = json.dumps(body).encode()
        hdrs = {**headers, "Content-Type": "application/json", "Accept": "text/event-stream"}
        try:
            self._conn.request("POST", path, body=data, headers=hdrs)
        except (ConnectionError, socket.gaierror) as exc:
            raise RemoteError("refused", f"{url}: {exc}") from exc
        except OSError as exc:
            raise RemoteError("refused", f"{url}: {exc}") from exc
        self._thread = threading.Thread(target=self._read, name="llm-remote-sse", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            resp = self._conn.getresponse()
            if resp.status != 200:
                raw = resp.read(400)
                self._queue.put(RemoteError("http", f"{self.url}: HTTP {resp.status} {raw!r}"))
                return
            while True:
                line = resp.readline()
                if not line:
                    self._queue.put(RemoteError("dropped", f"{self.url}: stream ended early"))
                    return
                line = line.strip()
                if not line.startswith(b"data:"):
                    continue  # comments (keep-alive pings), event names, blank separators
                payload = line[5:].strip()
                if payload == b"[DONE]":
                    self._queue.put(_END)
                    return
                try:
                    self._queue.put(json.loads(payload))
                except ValueError:
                    self._queue.put(RemoteError("dropped", f"{self.url}: bad event {payload!r}"))
                    return
        except TimeoutError:
            err = RemoteError("stalled", f"{self.url}: nothing for {self.timeout:.1f}s")
            self._queue.put(err)
        except (OSError, http.client.HTTPException, ValueError, AttributeError) as exc:
            kind = "dropped"
            if isinstance(exc, ConnectionRefusedError):
                kind = "refused"
            self._queue.put(RemoteError(kind, f"{self.url}: {exc}"))

    def next_event(self, poll: float) -> dict[str, Any] | None:
        if self._finished:
            raise StopIteration
        try:
            item = self._queue.get(timeout=poll)
        except queue.Empty:
            return None
        if item is _END:
            self._finished = True
            raise StopIteration
        if isinstance(item, RemoteError):
            self._finished = True
            if self._closed.is_set():
                raise StopIteration  # we closed it ourselves: not a server failure
            raise item
        return item

    def close(self) -> None:
        """Stop reading and drop the connection: the server sees the client go and stops."""
        if self._closed.is_set():
            return
        self._closed.set()
        sock = self._conn.sock
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        self._conn.close()
