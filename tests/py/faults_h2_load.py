"""The HTTP/2 side of the fault scenarios' load (tests/src/faults/driver.rs): a fixed request
rate over TLS with ALPN h2, with the python-hyper h2 library as the client, counting what
became of every request, as a browser's HTTP/2 client would see it:

  answered   a complete response, by status (a 200 whose body has another length is "cut");
  cut        a response that began and then ended early (its stream reset, its connection gone);
  lost       sent and never answered: the connection ended with the stream open and no
             response ("lost_closed"), or nothing came within ANSWER_TIMEOUT ("lost_timeout");
  retried    streams the server refused unprocessed (above the last stream id of its GOAWAY,
             or RST_STREAM REFUSED_STREAM; RFC 9113 8.1.4 says a client may retry them) that
             were sent again on a new connection: their final outcome is what counts;
  not_sent   no connection could be opened, or the clients were a second behind schedule.

A connection that got GOAWAY takes no new stream; its streams finish, then a new connection
is opened for the next requests (h2load, which cannot do this, stops at the first GOAWAY).

With HIT_PCT CACHE_PATHS WINDOW_S (the soak's mix, tests/src/faults/driver.rs `Mix`):
HIT_PCT % of the requests go to /cache/N (N < CACHE_PATHS), the others to a /miss/ path of
their own; every outcome is also counted in the window of WINDOW_S seconds of its scheduled
time, with the latency from the request's writing to the end of the response in 2 % log
buckets (the buckets of tests/src/faults/window.rs), under "windows" in the report.

Usage: faults_h2_load.py HOST PORT AUTHORITY RATE SECS CONNECTIONS ANSWER_TIMEOUT_S BODY_LEN
                         [HIT_PCT CACHE_PATHS WINDOW_S]
Prints one JSON object on stdout. Bounded: it ends ANSWER_TIMEOUT_S after the schedule.
"""

import json
import math
import queue
import socket
import ssl
import sys
import threading
import time

import h2.config
import h2.connection
import h2.errors
import h2.events
import hyperframe.frame

host, port, authority = sys.argv[1], int(sys.argv[2]), sys.argv[3]
rate, secs, conns = float(sys.argv[4]), float(sys.argv[5]), int(sys.argv[6])
answer_timeout, body_len = float(sys.argv[7]), int(sys.argv[8])
mix = (int(sys.argv[9]), int(sys.argv[10]), float(sys.argv[11])) if len(sys.argv) > 11 else None

MAX_BEHIND = 1.0
MAX_TRIES = 3
# A refused request is sent again on a connection opened after its refusal: another one
# opened before may have been refused by the same event (a reload's GOAWAY that its worker
# has not read yet). After this long it goes on any connection.
RESEND_AFTER = 0.5
IN_FLIGHT = 16

work = queue.Queue()
schedule_over = threading.Event()
lock = threading.Lock()
counts = {"sent": 0, "answered": {}, "cut": 0, "lost_closed": 0, "lost_timeout": 0,
          "not_sent": 0, "retried": 0}
windows = {}
start = time.monotonic()
WINDOW_KEY = {"sent": "sent", "cut": "cut", "lost_closed": "lost", "lost_timeout": "lost",
              "not_sent": "not_sent"}


def window(req):
    """The counts of req's window (the lock held), or None without a mix."""
    if mix is None or req is None:
        return None
    i = str(int(max(0.0, req.due - start) / mix[2]))
    if i not in windows:
        windows[i] = {"sent": 0, "answered": {}, "cut": 0, "lost": 0, "not_sent": 0, "hist": {}}
    return windows[i]


def count(key, req=None):
    with lock:
        counts[key] += 1
        w = window(req)
        if w is not None and key in WINDOW_KEY:
            w[WINDOW_KEY[key]] += 1


def answered(status, stream):
    """A complete response; its latency from the writing of its request (not from its
    scheduled time: a stream may wait up to 20 ms in this loop before it is written)."""
    with lock:
        counts["answered"][str(status)] = counts["answered"].get(str(status), 0) + 1
        w = window(stream.req)
        if w is not None:
            w["answered"][str(status)] = w["answered"].get(str(status), 0) + 1
            us = max(1.0, (time.monotonic() - stream.sent_at) * 1e6)
            b = str(math.floor(math.log(us) / math.log(1.02)))
            w["hist"][b] = w["hist"].get(b, 0) + 1


class Req:
    def __init__(self, due, n):
        self.due = due
        self.n = n
        self.tries = 0
        self.refused_at = None

    def path(self):
        if mix is None:
            return "/"
        if self.n % 100 < mix[0]:
            return f"/cache/{self.n % max(1, mix[1])}"
        return f"/miss/h2-{self.n}"


class Stream:
    def __init__(self, req):
        self.req = req
        self.status = None
        self.body = 0
        self.sent_at = time.monotonic()


def keep_open_after_goaway(conn):
    """python-h2 closes its whole connection state at GOAWAY and then refuses the responses
    of the streams the GOAWAY let finish (RFC 9113 6.8: those up to its last stream id are
    still processed); this keeps the state open so that they are read as a browser reads
    them. No new stream is sent on such a connection (Worker.goaway)."""
    table = conn._frame_dispatch_table
    receive_goaway = table[hyperframe.frame.GoAwayFrame]

    def receive(frame):
        result = receive_goaway(frame)
        conn.state_machine.state = h2.connection.ConnectionState.CLIENT_OPEN
        return result

    table[hyperframe.frame.GoAwayFrame] = receive


def connect():
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.set_alpn_protocols(["h2"])
    raw = socket.create_connection((host, port), timeout=5)
    sock = ctx.wrap_socket(raw, server_hostname=authority)
    if sock.selected_alpn_protocol() != "h2":
        sock.close()
        raise OSError("no h2 in ALPN")
    conn = h2.connection.H2Connection(
        h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
    keep_open_after_goaway(conn)
    conn.initiate_connection()
    sock.sendall(conn.data_to_send())
    sock.settimeout(0.02)
    return sock, conn


def retry(stream):
    """A stream the server refused unprocessed: sent again, or lost after MAX_TRIES."""
    if stream.req.tries + 1 >= MAX_TRIES:
        print(f"lost_closed: refused {MAX_TRIES} times", file=sys.stderr, flush=True)
        count("lost_closed", stream.req)
        return
    stream.req.tries += 1
    stream.req.refused_at = time.monotonic()
    count("retried")
    work.put(stream.req)


def ended(stream, reason_lost, why):
    """A stream that ended without its response completing (why: on stderr)."""
    print(f"{reason_lost if stream.status is None else 'cut'}: {why}", file=sys.stderr, flush=True)
    if stream.status is not None:
        count("cut", stream.req)
    else:
        count(reason_lost, stream.req)


class Worker:
    def __init__(self):
        self.sock = None
        self.conn = None
        self.opened_at = 0.0
        self.goaway = False
        self.goaway_last = None
        self.pending = {}

    def drop_connection(self, why="closed"):
        for sid, stream in self.pending.items():
            ended(stream, "lost_closed", f"stream {sid}: connection {why}, goaway {self.goaway_last}")
        self.pending.clear()
        if self.sock is not None:
            try:
                self.sock.close()
            except OSError:
                pass
        self.sock = self.conn = None
        self.goaway = False
        self.goaway_last = None

    def flush(self):
        try:
            self.sock.sendall(self.conn.data_to_send())
            return True
        except OSError as e:
            # The server may have said why (GOAWAY) before closing: read it first.
            self.drain()
            self.drop_connection(f"write error {e}")
            return False

    def drain(self):
        """Processes whatever the server sent before its connection ended."""
        try:
            self.sock.settimeout(0.2)
            while True:
                data = self.sock.recv(65536)
                if not data:
                    return
                for ev in self.conn.receive_data(data):
                    self.on_event(ev)
        except Exception:
            return

    def may_resend(self, req):
        """Whether a request may go on this worker's connection (see RESEND_AFTER)."""
        return (self.sock is None or req.refused_at is None or self.opened_at > req.refused_at
                or time.monotonic() - req.refused_at > RESEND_AFTER)

    def take_work(self):
        deferred = []
        try:
            self.take_work_but(deferred)
        finally:
            for req in deferred:
                work.put(req)

    def take_work_but(self, deferred):
        """Sends what is due; a refused request this connection may not take goes to deferred."""
        while len(self.pending) < IN_FLIGHT and not self.goaway:
            try:
                req = work.get_nowait()
            except queue.Empty:
                return
            if req.tries == 0 and time.monotonic() - req.due > MAX_BEHIND:
                count("not_sent", req)
                continue
            if not self.may_resend(req):
                deferred.append(req)
                continue
            if self.sock is None:
                try:
                    self.sock, self.conn = connect()
                    self.opened_at = time.monotonic()
                except OSError:
                    count("not_sent", req)
                    continue
            sid = self.conn.get_next_available_stream_id()
            self.conn.send_headers(sid, [(":method", "GET"), (":scheme", "https"),
                                         (":authority", authority), (":path", req.path())],
                                   end_stream=True)
            self.pending[sid] = Stream(req)
            if req.tries == 0:
                count("sent", req)
            if not self.flush():
                return

    def on_event(self, ev):
        if isinstance(ev, h2.events.ResponseReceived):
            stream = self.pending.get(ev.stream_id)
            if stream is not None:
                for name, value in ev.headers:
                    if name == ":status":
                        stream.status = int(value)
        elif isinstance(ev, h2.events.DataReceived):
            self.conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
            stream = self.pending.get(ev.stream_id)
            if stream is not None:
                stream.body += len(ev.data)
        elif isinstance(ev, h2.events.StreamEnded):
            stream = self.pending.pop(ev.stream_id, None)
            if stream is not None:
                if stream.status is None or (stream.status == 200 and stream.body != body_len):
                    count("cut", stream.req)
                else:
                    answered(stream.status, stream)
        elif isinstance(ev, h2.events.StreamReset):
            stream = self.pending.pop(ev.stream_id, None)
            if stream is not None:
                if stream.status is None and ev.error_code == h2.errors.ErrorCodes.REFUSED_STREAM:
                    retry(stream)
                else:
                    ended(stream, "lost_closed", f"stream {ev.stream_id} reset {ev.error_code!r}")
        elif isinstance(ev, h2.events.ConnectionTerminated):
            self.goaway = True
            self.goaway_last = ev.last_stream_id
            last = ev.last_stream_id or 0
            for sid in [s for s in self.pending if s > last]:
                stream = self.pending.pop(sid)
                if stream.status is None:
                    retry(stream)
                else:
                    count("cut", stream.req)

    def read(self):
        try:
            data = self.sock.recv(65536)
        except (socket.timeout, ssl.SSLWantReadError):
            return
        except OSError as e:
            self.drain()
            self.drop_connection(f"read error {e}")
            return
        if not data:
            self.drop_connection("closed by the server")
            return
        try:
            events = self.conn.receive_data(data)
        except Exception as e:
            self.drop_connection(f"protocol error {e!r}")
            return
        for ev in events:
            self.on_event(ev)
        if self.sock is not None:
            self.flush()

    def expire(self):
        now = time.monotonic()
        for sid in [s for s, st in self.pending.items() if now - st.sent_at > answer_timeout]:
            count("lost_timeout", self.pending.pop(sid).req)

    def run(self):
        while True:
            if self.goaway and not self.pending:
                self.drop_connection()
            if schedule_over.is_set() and work.empty() and not self.pending:
                self.drop_connection()
                return
            self.take_work()
            if self.sock is None:
                time.sleep(0.005)
                continue
            self.read()
            self.expire()


def main():
    global start
    workers = [threading.Thread(target=Worker().run, daemon=True) for _ in range(conns)]
    for w in workers:
        w.start()
    start = time.monotonic()
    n = 0
    while n < int(rate * secs):
        due = start + n / rate
        time.sleep(max(0.0, due - time.monotonic()))
        work.put(Req(due, n))
        n += 1
    schedule_over.set()
    deadline = time.monotonic() + answer_timeout + 2
    for w in workers:
        w.join(max(0.0, deadline - time.monotonic()))
    with lock:
        # A worker still running at the deadline has streams that never ended.
        if mix is not None:
            counts["windows"] = windows
        print(json.dumps(counts), flush=True)


main()
