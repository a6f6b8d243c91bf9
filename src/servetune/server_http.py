"""Every request servetune sends to a server it measures: direct, and with the server's key.

The servers are on loopback (or at a URL the user named): an `http_proxy`/`HTTPS_PROXY` in the
environment is meant for the internet and must not catch them. A server started with
`--api-key` or `VLLM_API_KEY` answers 401 to /v1 requests without `Authorization: Bearer KEY`.
Both clients (urllib for single calls, aiohttp for streams and scrapes) are built here, so no
request leaves without either rule. The key is only ever passed in; nothing here stores it.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import aiohttp

# ProxyHandler({}): no proxy, whatever http_proxy, HTTPS_PROXY or no_proxy say.
DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class ServerAnswerError(Exception):
    """A request to the server failed. `status`: the HTTP status it answered with (200 for an
    unusable body), None when no answer came (refused, reset, timed out)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


def auth_headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def session(api_key: str | None, timeout: aiohttp.ClientTimeout, **kwargs: Any) -> aiohttp.ClientSession:
    """An aiohttp session sending the key with every request. `trust_env=False` is aiohttp's
    default today; it is spelled out because True would route loopback through a proxy."""
    return aiohttp.ClientSession(timeout=timeout, headers=auth_headers(api_key), trust_env=False, **kwargs)


def _open(request: urllib.request.Request, timeout_s: float) -> tuple[int, bytes]:
    what = f"{request.get_method()} {request.full_url}"
    try:
        with DIRECT.open(request, timeout=timeout_s) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        raise ServerAnswerError(f"{what} answered HTTP {exc.code}: {_text(exc.read(200))}", exc.code) from None
    except OSError as exc:  # URLError, refused, reset, timed out
        reason = getattr(exc, "reason", exc)
        raise ServerAnswerError(f"{what} got no answer: {type(reason).__name__}: {reason}") from None


def get_json(url: str, api_key: str | None, timeout_s: float = 30.0) -> Any:
    status, body = _open(urllib.request.Request(url, headers=auth_headers(api_key)), timeout_s)
    return _json(url, status, body)


def get_text(url: str, api_key: str | None, timeout_s: float = 30.0) -> str:
    _, body = _open(urllib.request.Request(url, headers=auth_headers(api_key)), timeout_s)
    return body.decode(errors="replace")


def post(url: str, api_key: str | None, timeout_s: float = 30.0) -> int:
    """POST an empty body; the answer's status."""
    status, _ = _open(urllib.request.Request(url, data=b"", method="POST", headers=auth_headers(api_key)),
                      timeout_s)
    return status


async def aget_json(session: aiohttp.ClientSession, url: str) -> Any:
    """`get_json` on an aiohttp session (its key, timeout and no proxy)."""
    try:
        async with session.get(url) as resp:
            body = await resp.read()
            status = resp.status
    except (aiohttp.ClientError, TimeoutError, OSError) as exc:
        # A timeout's message is empty: say which limit ran out.
        why = str(exc) or f"none within {session.timeout.total or session.timeout.sock_read or 0:g} s"
        raise ServerAnswerError(f"GET {url} got no answer: {type(exc).__name__}: {why}") from None
    if status != 200:
        raise ServerAnswerError(f"GET {url} answered HTTP {status}: {_text(body)}", status)
    return _json(url, status, body)


def _text(body: bytes) -> str:
    return body[:200].decode(errors="replace").strip()


def _json(url: str, status: int, body: bytes) -> Any:
    try:
        return json.loads(body)
    except ValueError:
        raise ServerAnswerError(f"GET {url} answered HTTP {status} with a body that is not JSON: "
                                f"{body[:120]!r}", status) from None


def model_ids(listing: Any, url: str) -> list[str]:
    """The model names of a /v1/models answer (at least one)."""
    try:
        ids = [str(m["id"]) for m in listing["data"]]
    except (KeyError, TypeError):
        ids = []
    if not ids:
        raise ServerAnswerError(f"GET {url} answered without a model: {json.dumps(listing)[:200]}", 200)
    return ids
