#!/usr/bin/env python3
"""A hostile HTTP server for the fetch engine's body-level faults (docs/design/object_storage.md
section 5.2). Usage: hostile_server.py PORT. GET /MODE/obj serves a fixed 256 KiB object (byte i
= i * 7 % 251) misbehaving as MODE says; requests are counted per path.

Modes: ok, short_once (the first answer sends half its body then closes), short_always,
endless (206 without Content-Length, streams forever), ignore_range (200 with the whole object),
etag_flip (the ETag changes after the first answer), slowdown_once (503 SlowDown first),
long_body (Content-Length larger than the range), stall (the head, then silence), header_flood
(10 000 header lines), header_huge (200 KB of headers in 200 lines), header_line_huge (one 1 MiB
header line), redirect_loop (302 to itself), bad_xml
(403 with an endless malformed XML body), slowdown_forever (503 SlowDown every time),
cr_negative / cr_overflow (Content-Range "bytes -1-5/T" / "bytes 0-18446744073709551616/T"),
no_length_200 (200 with neither Content-Range nor Content-Length, the body up to the close),
weak_etag / weak_etag_flip (ETag W/"v1" and a Last-Modified that stays / changes after the first
answer), no_etag / no_etag_flip (the same without an ETag), no_validators (neither), trickle (the
head, then one byte every 0.2 s: above any stall rate, so only a limit on the whole transfer ends it).
With a second argument DIR, GET /files/REL
serves DIR/REL as a plain https-like server would (206 ranges, ETag from size and mtime, 404; a query
is ignored, as a static file server or a CDN ignores one it does not check). As an S3 endpoint,
bucket `s3deny` serves DIR the way S3 answers a caller with s3:GetObject but not s3:ListBucket:
the files that exist, and 403 AccessDenied for a missing key and for a listing. Bucket `listdup`
answers every ListObjectsV2 request with a page that lists one key twice (and 404 otherwise)."""
import os
import http.server
import re
import socketserver
import sys
import threading

SIZE = 256 * 1024
DATA = bytes((i * 7) % 251 for i in range(SIZE))
counts = {}
lock = threading.Lock()


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body are separate writes: no 40 ms delayed-ACK stalls

    def log_message(self, *args):
        pass

    def do_GET(self):
        with lock:
            n = counts.get(self.path, 0)
            counts[self.path] = n + 1
        mode = self.path.split("?", 1)[0].strip("/").split("/")[0]
        m = re.fullmatch(r"bytes=(\d+)-(\d+)", self.headers.get("Range", ""))
        if mode == "listdup":
            if "list-type=2" in self.path:
                key = "<Contents><Key>x/model.safetensors</Key><Size>100</Size></Contents>"
                self.send_xml(200, "<ListBucketResult><Name>listdup</Name><Prefix>x/</Prefix><KeyCount>2</KeyCount>"
                                   f"<IsTruncated>false</IsTruncated>{key}{key}</ListBucketResult>")
            else:
                self.send_xml(404, "<Error><Code>NoSuchKey</Code><Message>no</Message></Error>")
            return
        if mode == "s3deny" and (not m or not self.file_of(self.path)):
            self.send_xml(403, "<Error><Code>AccessDenied</Code><Message>Access Denied</Message>"
                               "<RequestId>1</RequestId></Error>")
            return
        if mode == "bad_xml" and not m:  # also answers plain GETs (HttpClient::get_document)
            self.hostile(mode, 0, 0, b"")
            return
        if not m:
            self.send_error(400)
            return
        if mode in ("files", "s3deny"):
            self.serve_file(int(m.group(1)), int(m.group(2)))
            return
        a, b = int(m.group(1)), min(int(m.group(2)), SIZE - 1)
        if a >= SIZE:
            self.send_response(416)
            self.send_header("Content-Range", f"bytes */{SIZE}")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        body = DATA[a : b + 1]
        etag = '"v2"' if (mode == "etag_flip" and n > 0) else '"v1"'
        if mode in ("stall", "trickle", "header_flood", "header_huge", "header_line_huge", "redirect_loop", "bad_xml", "slowdown_forever",
                    "cr_negative", "cr_overflow", "no_length_200"):
            self.hostile(mode, a, b, body)
            return
        if mode in ("weak_etag", "weak_etag_flip", "no_etag", "no_etag_flip", "no_validators"):
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {a}-{b}/{SIZE}")
            if mode.startswith("weak"):
                self.send_header("ETag", 'W/"v1"')
            if mode != "no_validators":
                day = 2 if (mode.endswith("_flip") and n > 0) else 1
                self.send_header("Last-Modified", f"Sun, 0{day} Nov 2025 08:49:37 GMT")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        if mode == "slowdown_once" and n == 0:
            self.slowdown()
            return
        if mode == "ignore_range":
            self.send_response(200)
            self.send_header("ETag", etag)
            self.send_header("Content-Length", str(SIZE))
            self.end_headers()
            self.wfile.write(DATA)
            return
        self.send_response(206)
        self.send_header("Content-Range", f"bytes {a}-{b}/{SIZE}")
        self.send_header("ETag", etag)
        if mode == "endless":
            self.send_header("Connection", "close")
            self.end_headers()
            try:
                while True:
                    self.wfile.write(body or b"x")
            except OSError:
                pass
            self.close_connection = True
            return
        if mode == "long_body":
            self.send_header("Content-Length", str(len(body) + 10))
            self.end_headers()
            self.wfile.write(body + b"0123456789")
            return
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if mode == "short_always" or (mode == "short_once" and n == 0):
            self.wfile.write(body[: len(body) // 2])
            self.wfile.flush()
            self.close_connection = True
            return
        self.wfile.write(body)


    def slowdown(self):
        """503 SlowDown, Retry-After 0 (S3's throttling answer)."""
        err = b"<Error><Code>SlowDown</Code><Message>Reduce your request rate</Message></Error>"
        self.send_response(503)
        self.send_header("Retry-After", "0")
        self.send_header("Content-Length", str(len(err)))
        self.end_headers()
        self.wfile.write(err)

    def hostile(self, mode, a, b, body):
        if mode == "stall":  # the head, then nothing: the client's low-speed timeout must fire
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {a}-{b}/{SIZE}")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.flush()
            for _ in range(300):  # 30 s at most; a client that gave up makes the write fail
                threading.Event().wait(0.1)
            self.close_connection = True
            return
        if mode == "trickle":  # a byte every 0.2 s, the ETag kept: sound, only slow
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {a}-{b}/{SIZE}")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("ETag", '"v1"')
            self.end_headers()
            try:
                for i in range(min(len(body), 150)):  # 30 s at most
                    self.wfile.write(body[i:i + 1])
                    self.wfile.flush()
                    threading.Event().wait(0.2)
            except OSError:  # the client gave up
                pass
            self.close_connection = True
            return
        if mode in ("header_flood", "header_huge", "header_line_huge"):
            self.send_response(206)
            try:
                if mode == "header_flood":
                    for i in range(10000):
                        self.send_header(f"X-Flood-{i}", "x" * 20)
                elif mode == "header_huge":  # 200 KB in 200 lines: under the line cap, over the byte cap
                    for i in range(200):
                        self.send_header(f"X-Big-{i}", "y" * 1000)
                else:  # one 1 MiB line: over libcurl's own cap (CURL_MAX_HTTP_HEADER, 100 KiB)
                    self.send_header("X-Huge", "y" * (1 << 20))
                self.send_header("Content-Range", f"bytes {a}-{b}/{SIZE}")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            except OSError:
                pass
            self.close_connection = True
            return
        if mode == "redirect_loop":
            self.send_response(302)
            self.send_header("Location", self.path)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if mode == "bad_xml":  # an error body that never ends and never closes its elements
            self.send_response(403)
            self.send_header("Content-Type", "application/xml")
            self.send_header("Connection", "close")
            self.end_headers()
            try:
                self.wfile.write(b"<Error><Code>Access<Denied")
                while True:
                    self.wfile.write(b"<Code>&&&<<<" * 4096)
            except OSError:
                pass
            self.close_connection = True
            return
        if mode == "slowdown_forever":
            self.slowdown()
            return
        if mode in ("cr_negative", "cr_overflow"):
            self.send_response(206)
            cr = f"bytes -1-{b}/{SIZE}" if mode == "cr_negative" else f"bytes {a}-18446744073709551616/{SIZE}"
            self.send_header("Content-Range", cr)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        if mode == "no_length_200":  # a server that ignores Range and ends the body by closing
            self.send_response(200)
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(DATA)
            self.close_connection = True
            return

    def send_xml(self, status, xml):
        """An S3-style XML answer (an error or a listing page)."""
        body = ('<?xml version="1.0" encoding="UTF-8"?>\n' + xml).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    @staticmethod
    def file_of(url_path):
        """DIR/REL for /MODE/REL (a query names no file), or None where there is no such file."""
        parts = url_path.split("?", 1)[0].split("#", 1)[0].split("/", 2)
        if len(parts) < 3 or not ROOT:
            return None
        path = os.path.realpath(os.path.join(ROOT, parts[2]))
        return path if path.startswith(ROOT + os.sep) and os.path.isfile(path) else None

    def serve_file(self, a, b):
        path = self.file_of(self.path)
        if path is None:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        st = os.stat(path)
        size = st.st_size
        if a >= size:
            self.send_response(416)
            self.send_header("Content-Range", f"bytes */{size}")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        b = min(b, size - 1)
        with open(path, "rb") as f:
            f.seek(a)
            body = f.read(b - a + 1)
        self.send_response(206)
        self.send_header("Content-Range", f"bytes {a}-{b}/{size}")
        self.send_header("ETag", f'"{size:x}-{st.st_mtime_ns:x}"')
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def handle_error(self, request, client_address):
        pass  # clients that hang up mid-answer (the endless mode) are expected


ROOT = os.path.realpath(sys.argv[2]) if len(sys.argv) > 2 else ""

if __name__ == "__main__":
    Server(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
