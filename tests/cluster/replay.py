#!/usr/bin/env python3
"""Replays a store handshake captured from the wire (tests/cluster/run.sh strangers).

    replay.py CAPTURE.pcap HOST

Finds, in an Ethernet/IPv4 pcap, the first TCP connection whose client bytes open with the store's Hello
magic ('MPST' little-endian), takes every byte the client sent on it, and sends them again to the same
port on HOST: the Hello first, then (after the server's answer) the rest, as the client did. Prints the
server's answer and exits 0 when the server refused (closed, or answered with a refusal), 1 when it
accepted the replay, 2 when the capture holds no store handshake.
"""
import socket
import struct
import sys

MAGIC = struct.pack("<I", 0x4D505354)
HELLO = 56  # net/handshake.h: the client's Hello


def streams(path):
    """{(src, sport, dst, dport): {seq: payload}} of the TCP segments in the capture."""
    out = {}
    with open(path, "rb") as f:
        head = f.read(24)
        endian = "<" if head[:4] == b"\xd4\xc3\xb2\xa1" else ">"
        while True:
            rec = f.read(16)
            if len(rec) < 16:
                break
            incl = struct.unpack(endian + "IIII", rec)[2]
            pkt = f.read(incl)
            if len(pkt) < 14 + 20 or pkt[12:14] != b"\x08\x00":
                continue
            ip = pkt[14:]
            ihl = (ip[0] & 15) * 4
            if ip[9] != 6:
                continue
            total = struct.unpack("!H", ip[2:4])[0]
            tcp = ip[ihl:total]
            sport, dport, seq = struct.unpack("!HHI", tcp[:8])
            data = tcp[(tcp[12] >> 4) * 4:]
            if data:
                key = (socket.inet_ntoa(ip[12:16]), sport, socket.inet_ntoa(ip[16:20]), dport)
                out.setdefault(key, {})[seq] = data
    return out


def main():
    cap, host = sys.argv[1], sys.argv[2]
    for key, segs in streams(cap).items():
        data = b"".join(segs[s] for s in sorted(segs))
        if data.startswith(MAGIC) and len(data) > HELLO:
            break
    else:
        print("no store handshake in the capture")
        return 2
    port = key[3]
    print(f"replaying {len(data)} bytes that {key[0]}:{key[1]} sent to port {port}")
    s = socket.create_connection((host, port), timeout=10)
    s.sendall(data[:HELLO])
    answer = s.recv(4096)
    print(f"the server's challenge: {len(answer)} bytes")
    try:
        s.sendall(data[HELLO:])
        reply = b""
        while len(reply) < 5 or len(reply) < 5 + struct.unpack("<I", reply[1:5])[0]:
            chunk = s.recv(4096)
            if not chunk:
                break
            reply += chunk
    except (ConnectionResetError, BrokenPipeError):
        reply = b""
    s.close()
    if reply[:1] == b"\x00":
        print("ACCEPTED: the server handed out a credential to a replay")
        return 1
    print("refused:", reply[5:].decode(errors="replace") if reply else "the server closed the connection")
    return 0


sys.exit(main())
