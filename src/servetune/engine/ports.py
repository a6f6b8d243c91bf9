"""Loopback ports: pick a free one, ask whether one is free, wait until one is released."""

from __future__ import annotations

import socket
import time

LOOPBACK = "127.0.0.1"


def free_port(host: str = LOOPBACK) -> int:
    """A port the OS says is free right now (another process may still take it before we do)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def port_is_free(port: int, host: str = LOOPBACK) -> bool:
    """True when nothing listens on `port`. SO_REUSEADDR so that TIME_WAIT leftovers of a
    closed server do not count as held: a new server can bind through them as well."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def wait_port_free(port: int, timeout_s: float, host: str = LOOPBACK) -> bool:
    deadline = time.monotonic() + timeout_s
    while True:
        if port_is_free(port, host):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)
