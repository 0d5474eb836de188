#!/usr/bin/env python3
"""The proxy's CPU per QUIC handshake, full against resumed with a session ticket.

Usage: benches/ab/h3_resume_cost.py PORT N PID   against a running proxy (PID) with an h3
listener on 127.0.0.1:PORT serving site.test: one connection takes a ticket, then N
handshakes without it and N with it, twice, alternated; each prints how many resumed and
the proxy's CPU (user + system, from /proc, 10 ms ticks) per handshake. aioquic is the
client, one handshake at a time (a PING each). Timed: run it on a quiet machine, or read
the two rows of one run as a ratio.
"""
import asyncio
import ssl
import sys

from aioquic.asyncio import connect
from aioquic.h3.connection import H3_ALPN
from aioquic.quic.configuration import QuicConfiguration


def cpu(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100


def config(ticket=None):
    return QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN, server_name="site.test",
                             verify_mode=ssl.CERT_NONE, session_ticket=ticket)


async def main(port, n, pid):
    tickets = []
    async with connect("127.0.0.1", port, configuration=config(),
                       session_ticket_handler=tickets.append) as client:
        await client.ping()
        await asyncio.sleep(0.2)
    if not tickets:
        sys.exit("no session ticket: is tls_tickets disabled?")
    for label, ticket in [("full", None), ("resumed", tickets[-1])] * 2:
        before, resumed = cpu(pid), 0
        for _ in range(n):
            async with connect("127.0.0.1", port, configuration=config(ticket)) as client:
                await client.ping()
                resumed += client._quic.tls.session_resumed
        per = (cpu(pid) - before) * 1000 / n
        print(f"{label}: {resumed} of {n} resumed, proxy CPU {per:.2f} ms per handshake",
              flush=True)


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])))
