"""Rendezvous ports for the suite's multi-process tests, safe beside other jobs and workers."""

from __future__ import annotations

import random
import socket


def _ephemeral_start() -> int:
    """Where the kernel's ephemeral ports begin (Linux's default where it cannot be read)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as ranges:
            return int(ranges.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port() -> int:
    """A free port for a rendezvous, below the kernel's ephemeral range.

    A port the kernel handed out (``bind(0)``) and that was then closed can go at once to any
    other process's socket: a gloo listener or client of another job running meanwhile (the
    gate runs two test jobs at once). A rank connecting to it then waits on a stranger. Ports
    below the ephemeral range are never handed out that way; random ones keep two jobs apart.
    """
    top = _ephemeral_start()
    for _ in range(200):
        port = random.randrange(max(1024, top - 12000), top)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as sock:  # all taken: let the kernel choose
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
