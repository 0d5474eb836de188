"""A backend for the sticky-session tests: one process per server, so a test can kill one
(by pid) and the proxy finds its port refusing connections.

    python3 sticky_origin.py PORT

Every answer's body is `server PORT` and carries the Cookie field the proxy forwarded in
`X-Seen-Cookie` (`-` when none). `/login` also sets `sid=srv-PORT-N`, the session cookie a
`learn name=sid` group pins on.
"""

import itertools
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PORT = int(sys.argv[1])
LOGINS = itertools.count(1)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        body = f"server {PORT}\n".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("X-Seen-Cookie", self.headers.get("Cookie", "-"))
        if self.path.startswith("/login"):
            self.send_header("Set-Cookie", f"sid=srv-{PORT}-{next(LOGINS)}; Path=/")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


ThreadingHTTPServer.daemon_threads = True
ThreadingHTTPServer(("127.0.0.1", PORT), Handler).serve_forever()
