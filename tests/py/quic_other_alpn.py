#!/usr/bin/env python3
"""A QUIC server that speaks only ALPN `hq-interop`, not `h3` (tests/tests/http_perf_h3.rs):
a client offering only h3 is refused at the handshake (TLS alert no_application_protocol).

Usage: quic_other_alpn.py PORT CERT KEY SECONDS   prints "listening PORT", serves for SECONDS.
"""
import asyncio
import sys

try:
    from aioquic.asyncio import serve
    from aioquic.quic.configuration import QuicConfiguration
except ImportError:
    print("aioquic is missing: python3 -m pip install aioquic (tests/run.sh does)")
    sys.exit(2)


async def main(port, cert, key, seconds):
    config = QuicConfiguration(is_client=False, alpn_protocols=["hq-interop"])
    config.load_cert_chain(cert, key)
    server = await serve("127.0.0.1", port, configuration=config)
    print(f"listening {port}", flush=True)
    await asyncio.sleep(seconds)
    server.close()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]), sys.argv[2], sys.argv[3], float(sys.argv[4])))
