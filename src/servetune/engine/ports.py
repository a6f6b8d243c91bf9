"""Loopback ports: pick a free one, ask whether one is free, wait until one is released, who holds one."""

from __future__ import annotations

import socket
import time

import psutil

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


def listening_pids(port: int, host: str = LOOPBACK) -> list[int]:
    """Pids listening on `port` (on `host` or any address) that this user may see."""
    pids = set()
    try:
        connections = psutil.net_connections(kind="tcp")
    except psutil.AccessDenied:
        return []
    for conn in connections:
        if (conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port
                and conn.laddr.ip in (host, "0.0.0.0", "::") and conn.pid is not None):
            pids.add(conn.pid)
    return sorted(pids)
