"""``repliscope serve``'s listening socket: the connections it accepts have TCP_NODELAY set (regression: the
socket was created with proto 0, so asyncio never set it and every keep-alive response waited ~40 ms for the
client's delayed ACK). Checked on a real uvicorn server on 127.0.0.1, on the server side of the connection."""

from __future__ import annotations

import http.client
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("uvicorn", reason="the 'service' extra is not installed")

from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from repliscope.cli.serve_cmd import bind_socket, uvicorn_server


def _app() -> Starlette:
    return Starlette(routes=[Route("/ping", lambda _request: PlainTextResponse("pong"))])


@pytest.fixture(params=["asyncio", "uvloop"])
def served(request: pytest.FixtureRequest) -> Iterator[tuple[Any, int]]:
    """``repliscope serve``'s uvicorn server on ``bind_socket`` (a free 127.0.0.1 port), run in a thread, on
    asyncio's event loop (the one that needs IPPROTO_TCP) and on uvloop's (the 'service' extra's default)."""
    if request.param == "uvloop":
        pytest.importorskip("uvloop", reason="uvloop is not installed")
    sock = bind_socket("127.0.0.1", 0)
    port = sock.getsockname()[1]
    server = uvicorn_server(_app())
    server.config.loop = request.param
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start within 20 s"
        time.sleep(0.02)
    yield server, port
    server.should_exit = True
    thread.join(timeout=20)
    sock.close()


def test_the_listening_socket_is_a_tcp_socket_with_nodelay() -> None:
    sock = bind_socket("127.0.0.1", 0)
    try:
        assert sock.proto == socket.IPPROTO_TCP
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1
    finally:
        sock.close()


def test_accepted_keep_alive_connections_have_tcp_nodelay(served: tuple[Any, int]) -> None:
    server, port = served
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        for _ in range(2):  # two requests on one keep-alive connection
            conn.request("GET", "/ping")
            response = conn.getresponse()
            assert (response.status, response.read()) == (200, b"pong")
        connections = list(server.server_state.connections)
        assert len(connections) == 1
        accepted = connections[0].transport.get_extra_info("socket")
        assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
        assert accepted.getsockname() == ("127.0.0.1", port)
    finally:
        conn.close()


def test_idle_keep_alive_connections_outlive_the_clients_own_expiry() -> None:
    """Regression: uvicorn's default 5 s equals httpx's idle expiry; the server closed connections a client was
    reusing (ReadError under 200 concurrent readers). The server must keep them longer than clients do."""
    import httpx

    server = uvicorn_server(_app())
    client_expiry = httpx.Limits().keepalive_expiry
    assert client_expiry is not None
    assert server.config.timeout_keep_alive == 75 > client_expiry
