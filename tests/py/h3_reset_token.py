#!/usr/bin/env python3
"""Stateless resets from any worker (tests/tests/h3_floods.rs).

Usage: h3_reset_token.py PORT N [HOST]   One HTTP/3 GET with aioquic to HOST:PORT (default
127.0.0.1; the sockets below are connected to it, so take answers from it only), keeping the
connection IDs the server issued with their stateless reset tokens; the connection is
closed; then N new UDP sockets (new source ports, so SO_REUSEPORT spreads them over the
workers) each send a short-header datagram for one of those connection IDs. Prints
"resets R matched M of N": R answers came back, M of them ending in the token the server
issued for that connection ID (RFC 9000 §10.3). Exits 1 on a timeout of the GET.
"""
import asyncio
import os
import socket
import ssl
import sys
import time

try:
    from aioquic.asyncio import connect
    from aioquic.quic.configuration import QuicConfiguration
    from aioquic.h3.connection import H3_ALPN
except ImportError:
    print("aioquic is missing: python3 -m pip install aioquic (tests/run.sh does)")
    sys.exit(2)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from h3_fetch import Fetch  # noqa: E402


async def issued_ids(host, port):
    config = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN,
                               server_name="site.test", verify_mode=ssl.CERT_NONE)
    async with connect(host, port, configuration=config,
                       create_protocol=Fetch) as client:
        client.get(f"site.test:{port}", "/")
        await asyncio.wait_for(client.done, 10)
        quic = client._quic
        ids = [quic._peer_cid] + list(quic._peer_cid_available)
        return [(c.cid, c.stateless_reset_token) for c in ids if c.stateless_reset_token]


def main(port, n, host="127.0.0.1"):
    ids = asyncio.run(issued_ids(host, port))
    if not ids:
        print("no connection ID with a reset token")
        sys.exit(1)
    # The server forgets the connection once its draining period is over.
    time.sleep(1.5)
    answered = matched = 0
    for k in range(n):
        cid, token = ids[k % len(ids)]
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.settimeout(2)
        s.connect((host, port))
        s.send(bytes([0x41]) + cid + os.urandom(60))
        try:
            reply = s.recv(1500)
            answered += 1
            matched += reply[-16:] == token and (reply[0] & 0xC0) == 0x40
        except socket.timeout:
            pass
        s.close()
        # quinn-proto sends at most one reset per 20 ms per endpoint.
        time.sleep(0.05)
    print(f"resets {answered} matched {matched} of {n}")


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), *sys.argv[3:4])
