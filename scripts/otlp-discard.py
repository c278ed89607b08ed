#!/usr/bin/env python3
"""An OTLP/HTTP endpoint that takes every export and throws it away, answering 200 with an empty
ExportTraceServiceResponse: something for `payhook serve` to export to when only payhook's own cost is measured
(BENCHMARKS.md, *Trace export*). Not a collector: nothing is decoded or kept.

    python3 scripts/otlp-discard.py [PORT]    # default 4318; counts what it took on SIGTERM/Ctrl-C
"""
import http.server
import signal
import sys

taken = {"requests": 0, "bytes": 0}


class Discard(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        length = int(self.headers.get("content-length", "0"))
        self.rfile.read(length)
        taken["requests"] += 1
        taken["bytes"] += length
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def main():
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 4318
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Discard)

    def stop(*_):
        print(f"otlp-discard: {taken['requests']} exports, {taken['bytes']} bytes", file=sys.stderr)
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    server.serve_forever()


if __name__ == "__main__":
    main()
