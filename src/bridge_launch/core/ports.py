"""Port facts shared by the profile check and the torchrun options."""

from __future__ import annotations

# Linux's default net.ipv4.ip_local_port_range (Documentation/networking/ip-sysctl.rst; also
# this machine's /proc/sys/net/ipv4/ip_local_port_range): outgoing connections take their local
# port from here, so a listening port inside it can already be held by one (EADDRINUSE at start).
EPHEMERAL_PORTS = (32768, 60999)


def port_in_ephemeral_range(port: int) -> bool:
    return EPHEMERAL_PORTS[0] <= port <= EPHEMERAL_PORTS[1]
