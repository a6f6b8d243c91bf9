"""A running server (--url) asked once for its models before any measurement, with short limits: a
port nobody listens on, a host that never accepts, or a server that accepts and never answers is
named within seconds, on screen while it is waited for, instead of failing the run minutes later."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import aiohttp
from rich.console import Console

from .. import server_http
from ..errors import NoResult

DEFAULT_CONNECT_TIMEOUT_S = 10.0
DEFAULT_FIRST_BYTE_TIMEOUT_S = 30.0
CONNECT_HELP = f"seconds to open a connection to the server (default {DEFAULT_CONNECT_TIMEOUT_S:g})"
FIRST_BYTE_HELP = (f"seconds the server may take to answer its first request, /v1/models "
                   f"(default {DEFAULT_FIRST_BYTE_TIMEOUT_S:g})")


def check_reachable(base_url: str, api_key: str | None, console: Console, *,
                    connect_timeout_s: float | None = None, first_byte_timeout_s: float | None = None) -> None:
    """GET /v1/models, showing what is waited for and how long until it is given up; NoResult (exit 1)
    naming the limit that ran out. Any answer, even an error status, is left to the run to judge."""
    connect = connect_timeout_s or DEFAULT_CONNECT_TIMEOUT_S
    first_byte = first_byte_timeout_s or DEFAULT_FIRST_BYTE_TIMEOUT_S
    url = base_url + "/v1/models"
    with console.status(f"asking {url} ...") as status:
        def waiting(elapsed: float) -> None:
            left = connect + first_byte - elapsed
            status.update(f"waiting for {url}: no answer for {elapsed:.0f} s; giving up in {max(left, 0):.0f} s "
                          "(--connect-timeout, --first-byte-timeout)")

        error = asyncio.run(_ask(url, api_key, connect, first_byte, waiting))
    if error is not None:
        raise NoResult(f"server at {base_url}: {error}; nothing measured, nothing written")


async def _ask(url: str, api_key: str | None, connect: float, first_byte: float,
               waiting: Callable[[float], None]) -> str | None:
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=connect, sock_read=first_byte)
    start = time.monotonic()
    async with server_http.session(api_key, timeout) as session:
        task = asyncio.ensure_future(_get(session, url))
        while not task.done():
            await asyncio.wait([task], timeout=0.5)
            waiting(time.monotonic() - start)
        try:
            task.result()
        except aiohttp.ConnectionTimeoutError:
            return f"no connection within {connect:g} s (--connect-timeout)"
        except (aiohttp.SocketTimeoutError, TimeoutError):
            return f"connected, but no answer to GET {url} within {first_byte:g} s (--first-byte-timeout)"
        except (aiohttp.ClientError, OSError) as exc:
            return f"unreachable: {exc or type(exc).__name__}"
    return None


async def _get(session: aiohttp.ClientSession, url: str) -> None:
    async with session.get(url) as resp:
        await resp.read()
