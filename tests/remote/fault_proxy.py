#!/usr/bin/env python3
"""A fault-injecting HTTP proxy between ctstream and a real S3 server (`rclone serve s3`):
docs/design/object_storage.md section 5.1.

Every request is forwarded verbatim (method, path, query and headers unchanged, Host included, so
SigV4 signatures stay valid) to --upstream over a persistent http.client connection; the answer is
relayed, unless a scripted fault takes it over.

    python3 tests/remote/fault_proxy.py --upstream http://127.0.0.1:P [--port 0] [--rate B/s]
                                        [--fault SPEC ...]

prints "PORT <n>" on its first line once it listens. --rate limits every response body to B bytes
per second (the benchmark's slow link).

A fault SPEC is `action[,key=value...]`, keys:
  times=N    fault the first N matching GETs (default 1; -1: every one)
  skip=N     let the first N matching GETs through first (default 0)
  path=RE    only requests whose path (query excluded) matches RE (re.search; default: all)
  min_len=N  only ranged GETs asking for at least N bytes (default 0)
actions:
  drop,bytes=K           relay the head and K body bytes, then reset the connection (RST)
  truncate               relay the head (full Content-Length) and half the body, then close (FIN)
  slowdown[,after=S]     503 with <Code>SlowDown</Code> (and Retry-After: S when given)
  stall,bytes=K,secs=S   relay the head and K body bytes, wait S seconds, then the rest
Faults apply to successful (2xx) GETs carrying a Range header, except slowdown, which needs none of
that. Rules are tried in order; the first whose filters match and whose count is not used up wins.

Control (answered by the proxy itself, never forwarded): GET /__proxy__/arm?SPEC adds a rule,
GET /__proxy__/clear drops all rules, GET /__proxy__/stats answers "faults=N requests=M".
"""
import argparse
import http.client
import http.server
import re
import socket
import socketserver
import struct
import sys
import threading
import time
import urllib.parse

HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-connection"}


class Rule:
    def __init__(self, spec):
        parts = spec.split(",")
        self.action = parts[0]
        if self.action not in ("drop", "truncate", "slowdown", "stall"):
            raise ValueError(f"unknown fault action {self.action!r}")
        kv = {}
        for p in parts[1:]:
            k, _, v = p.partition("=")
            kv[k] = v
        self.times = int(kv.pop("times", "1"))
        self.skip = int(kv.pop("skip", "0"))
        self.path = re.compile(kv.pop("path", ""))
        self.min_len = int(kv.pop("min_len", "0"))
        self.bytes = int(kv.pop("bytes", "0"))
        self.secs = float(kv.pop("secs", "0"))
        self.after = kv.pop("after", None)
        if kv:
            raise ValueError(f"unknown fault keys {sorted(kv)}")
        self.seen = 0

    def take(self, path, length):
        """Whether this rule faults a request (counts it when its filters match)."""
        if not self.path.search(path) or (self.action != "slowdown" and length is None):
            return False
        if length is not None and length < self.min_len:
            return False
        self.seen += 1
        if self.seen <= self.skip:
            return False
        return self.times < 0 or self.seen - self.skip <= self.times


class State:
    def __init__(self, upstream, rate, specs):
        u = urllib.parse.urlsplit(upstream)
        self.host, self.port = u.hostname, u.port or 80
        self.rate = rate
        self.rules = [Rule(s) for s in specs]
        self.lock = threading.Lock()
        self.faults = 0
        self.requests = 0

    def pick(self, method, path, length):
        with self.lock:
            self.requests += 1
            if method != "GET":
                return None
            for r in self.rules:
                if r.take(path, length):
                    self.faults += 1
                    return r
        return None


STATE = None


def range_length(value):
    m = re.fullmatch(r"bytes=(\d+)-(\d+)", value or "")
    return int(m.group(2)) - int(m.group(1)) + 1 if m else None


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    upstream = None

    def log_message(self, *args):
        pass

    def do_GET(self):
        self.relay()

    def do_HEAD(self):
        self.relay()

    def do_PUT(self):
        self.relay()

    def do_POST(self):
        self.relay()

    def do_DELETE(self):
        self.relay()

    def control(self, path, query):
        what = path[len("/__proxy__/"):]
        with STATE.lock:
            if what == "arm":
                STATE.rules.append(Rule(urllib.parse.unquote(query)))
                text = "armed"
            elif what == "clear":
                STATE.rules.clear()
                text = "cleared"
            else:
                text = f"faults={STATE.faults} requests={STATE.requests}"
        body = text.encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def send_body(self, data):
        """Writes data, at --rate bytes/s when set."""
        if not STATE.rate:
            self.wfile.write(data)
            return
        step = max(1, min(len(data), STATE.rate // 20 or 1))
        for i in range(0, len(data), step):
            t0 = time.monotonic()
            self.wfile.write(data[i : i + step])
            self.wfile.flush()
            left = step / STATE.rate - (time.monotonic() - t0)
            if left > 0:
                time.sleep(left)

    def reset(self):
        """Closes the client connection with a RST (SO_LINGER 0): a dropped connection."""
        try:
            self.wfile.flush()
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
        self.close_connection = True

    def relay(self):
        path, _, query = self.path.partition("?")
        if path.startswith("/__proxy__/"):
            self.control(path, query)
            return
        length = range_length(self.headers.get("Range"))
        rule = STATE.pick(self.command, path, length)
        if rule and rule.action == "slowdown":
            self.drain_request()
            err = b"<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>"
            self.send_response(503)
            if rule.after is not None:
                self.send_header("Retry-After", rule.after)
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(err)))
            self.end_headers()
            self.wfile.write(err)
            return
        body_in = self.drain_request()
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
        for attempt in range(2):  # a kept-alive upstream connection may have been closed meanwhile
            try:
                if self.upstream is None:
                    self.upstream = http.client.HTTPConnection(STATE.host, STATE.port, timeout=60)
                self.upstream.request(self.command, self.path, body=body_in, headers=headers)
                resp = self.upstream.getresponse()
                break
            except (OSError, http.client.HTTPException):
                self.upstream = None
                if attempt:
                    self.send_error(502)
                    return
        length = resp.getheader("Content-Length")
        streamed = self.command != "HEAD" and length is not None and rule is None
        # A body is relayed as it arrives (the benchmark's ranges are large); one without a length
        # (chunked), or one a fault cuts, is read first.
        data = b"" if streamed or self.command == "HEAD" else resp.read()
        self.send_response_only(resp.status, resp.reason)
        for k, v in resp.getheaders():
            if k.lower() not in HOP_BY_HOP and k.lower() != "content-length":
                self.send_header(k, v)
        if streamed or self.command == "HEAD":
            if length is not None:
                self.send_header("Content-Length", length)
        else:
            self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command == "HEAD":
            resp.read()
        elif streamed:
            while True:
                piece = resp.read(1 << 16)
                if not piece:
                    break
                self.send_body(piece)
        if resp.will_close:
            self.upstream = None
        if streamed or self.command == "HEAD":
            return
        if rule is None or not (200 <= resp.status < 300):
            self.send_body(data)
            return
        if rule.action == "drop":
            self.send_body(data[: min(rule.bytes, len(data))])
            self.reset()
        elif rule.action == "truncate":
            self.send_body(data[: len(data) // 2])
            self.wfile.flush()
            self.close_connection = True
        elif rule.action == "stall":
            k = min(rule.bytes, len(data))
            self.send_body(data[:k])
            self.wfile.flush()
            time.sleep(rule.secs)
            try:
                self.send_body(data[k:])
            except OSError:
                self.close_connection = True

    def drain_request(self):
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else None


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def handle_error(self, request, client_address):
        pass  # clients that hang up (after a stall, a drop) are expected


def main():
    global STATE
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--upstream", required=True, help="http://host:port of the S3 server")
    ap.add_argument("--port", type=int, default=0, help="port to listen on (0: any free one)")
    ap.add_argument("--rate", type=int, default=0, help="response body bytes per second (0: unlimited)")
    ap.add_argument("--fault", action="append", default=[], help="a fault rule (see the module doc)")
    args = ap.parse_args()
    STATE = State(args.upstream, args.rate, args.fault)
    srv = Server(("127.0.0.1", args.port), Handler)
    print(f"PORT {srv.server_address[1]}", flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()
