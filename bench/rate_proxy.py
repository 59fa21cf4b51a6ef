#!/usr/bin/env python3
"""A TCP forwarder that limits the server-to-client direction of all its connections together to
RATE bytes/s (one shared token bucket: a link of that speed), for the throttled-link rows of
bench/remote_bench.py. Bytes pass unchanged, so SigV4 signatures (which cover the Host header the
client sent to this proxy) stay valid. Prints "listening PORT" once ready; stop it with SIGTERM.

    python3 bench/rate_proxy.py --listen 0 --target 127.0.0.1:9000 --rate 100M
"""
import argparse
import signal
import socket
import sys
import threading
import time


def parse_rate(s: str) -> float:
    units = {"k": 1e3, "m": 1e6, "g": 1e9}
    s = s.strip().lower().rstrip("b/s")
    return float(s[:-1]) * units[s[-1]] if s[-1] in units else float(s)


class Bucket:
    """Shared token bucket: take(n) returns after n bytes' worth of time at `rate`."""

    def __init__(self, rate: float):
        self.rate, self.lock, self.next_free = rate, threading.Lock(), time.monotonic()

    def take(self, n: int):
        with self.lock:
            now = time.monotonic()
            start = max(now, self.next_free)
            self.next_free = start + n / self.rate
            wait = self.next_free - now
        if wait > 0:
            time.sleep(wait)


def pipe(src, dst, bucket):
    try:
        while True:
            data = src.recv(64 << 10)
            if not data:
                break
            if bucket:
                bucket.take(len(data))
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--listen", type=int, default=0)
    ap.add_argument("--target", required=True, help="HOST:PORT")
    ap.add_argument("--rate", required=True, help="bytes/s, e.g. 100M (decimal units)")
    a = ap.parse_args()
    host, port = a.target.rsplit(":", 1)
    bucket = Bucket(parse_rate(a.rate))
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", a.listen))
    srv.listen(128)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print("listening", srv.getsockname()[1], flush=True)
    while True:
        c, _ = srv.accept()
        u = socket.create_connection((host, int(port)))
        for s in (c, u):
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        threading.Thread(target=pipe, args=(c, u, None), daemon=True).start()
        threading.Thread(target=pipe, args=(u, c, bucket), daemon=True).start()


if __name__ == "__main__":
    main()
