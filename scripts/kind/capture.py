#!/usr/bin/env python3
"""Watches what leaves the machine by its outside interface while a tier runs, and fails when
any packet went to a private, shared or link-local address (the resolver's aside):

    capture.py start IFACE REPORT RESOLVER...   (in the background; stops on SIGTERM)
    capture.py check REPORT                     (after it stopped: exit 1 and the packets if any)

A raw AF_PACKET socket on IFACE sees every outgoing frame (no tcpdump needed). IPv4 and IPv6;
IPv6 neighbour discovery and multicast are the interface's own upkeep and not counted."""
import ipaddress
import json
import signal
import socket
import struct
import sys

ETH_P_ALL = 0x0003
PACKET_OUTGOING = 4
WATCHED = [ipaddress.ip_network(n) for n in (
    "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16",  # private (RFC 1918)
    "100.64.0.0/10",                                  # shared (RFC 6598)
    "169.254.0.0/16",                                 # link-local
    "fc00::/7", "fe80::/10",                          # unique local, link-local
)]


def destination(frame):
    """The frame's IP destination, and whether it is neighbour discovery, or None."""
    ethertype = struct.unpack("!H", frame[12:14])[0]
    payload = frame[14:]
    if ethertype == 0x8100 and len(frame) >= 18:  # one VLAN tag
        ethertype = struct.unpack("!H", frame[16:18])[0]
        payload = frame[18:]
    if ethertype == 0x0800 and len(payload) >= 20:
        return ipaddress.ip_address(payload[16:20]), False
    if ethertype == 0x86DD and len(payload) >= 40:
        icmp6 = payload[6] == 58 and len(payload) > 40 and 133 <= payload[40] <= 137
        return ipaddress.ip_address(payload[24:40]), icmp6
    return None, False


def start(iface, report, resolvers):
    allowed = {ipaddress.ip_address(r) for r in resolvers}
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    sock.bind((iface, 0))
    seen = {"interface": iface, "frames": 0, "watched": []}
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(1))
    sock.settimeout(0.5)
    with open(report + ".started", "w") as ready:
        ready.write("ok\n")
    while not stopping:
        try:
            frame, addr = sock.recvfrom(65535)
        except socket.timeout:
            continue
        except InterruptedError:
            continue
        if addr[2] != PACKET_OUTGOING:
            continue
        seen["frames"] += 1
        dst, neighbour = destination(frame)
        if dst is None or neighbour or dst.is_multicast or dst in allowed:
            continue
        if any(dst in net for net in WATCHED) and len(seen["watched"]) < 100:
            seen["watched"].append(str(dst))
    with open(report, "w") as out:
        json.dump(seen, out)


def check(report):
    with open(report) as f:
        seen = json.load(f)
    if seen["watched"]:
        print(f"packets left {seen['interface']} for private, shared or link-local addresses: "
              f"{sorted(set(seen['watched']))}", file=sys.stderr)
        return 1
    print(f"{seen['frames']} frames left {seen['interface']} during the tier; none to a private, "
          "shared or link-local address but the resolver")
    return 0


if __name__ == "__main__":
    if len(sys.argv) >= 4 and sys.argv[1] == "start":
        start(sys.argv[2], sys.argv[3], sys.argv[4:])
    elif len(sys.argv) == 3 and sys.argv[1] == "check":
        sys.exit(check(sys.argv[2]))
    else:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
