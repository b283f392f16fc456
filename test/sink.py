#!/usr/bin/env python3
"""A webhook endpoint for the tests and the demo, on 127.0.0.1 only.

It records every POST it receives and answers according to rules set through
its control API, so that a test can make it fail, fail some events a number
of times, or answer slowly:

  POST /_control  {"status": 503}                  answer every event with 503
                  {"fail": {"<event-id>": 1}}       fail that event once (500)
                  {"delay_ms": 3000}                wait before answering
                  {"echo": ["authorization", "x-tenant"]}
                                                    answer with those request
                                                    headers as "name: value" lines
  GET  /_requests  every request received: webhook-id, headers, header_names
                   (every header name as sent, repeats included), body, status
  GET  /_stats     {"requests": n, "delivered": n, "distinct": n}
                   (both take ?path=/p to count the requests to one path only)
  POST /_reset     forget requests and rules

Usage: sink.py --port-file FILE   (the chosen port is written there once the
server listens; it runs until killed).
"""
import argparse
import json
import os
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

lock = threading.Lock()
requests = []
rules = {"status": 200, "fail": {}, "delay_ms": 0, "echo": []}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the relay expects

    def setup(self):
        super().setup()
        # headers and body go out in two writes: without this, Nagle's
        # algorithm holds the body until the client's delayed ACK (~40 ms)
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, fmt, *args):
        pass

    def reply(self, status, obj=None):
        body = json.dumps(obj if obj is not None else {}).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def read_body(self):
        length = int(self.headers.get("content-length", "0"))
        return self.rfile.read(length) if length else b""

    def do_GET(self):
        url = urlsplit(self.path)
        only = parse_qs(url.query).get("path", [None])[0]
        with lock:
            mine = [r for r in requests if only is None or r["path"] == only]
            if url.path == "/_requests":
                return self.reply(200, mine)
            if url.path == "/_stats":
                ok = [r for r in mine if 200 <= r["status"] < 300]
                return self.reply(200, {
                    "requests": len(mine),
                    "delivered": len(ok),
                    "distinct": len({r["webhook_id"] for r in ok}),
                })
        self.reply(404)

    def do_POST(self):
        body = self.read_body()
        if self.path == "/_control":
            with lock:
                rules.update(json.loads(body))
            return self.reply(200, rules)
        if self.path == "/_reset":
            with lock:
                requests.clear()
                rules.update({"status": 200, "fail": {}, "delay_ms": 0, "echo": []})
            return self.reply(200)

        event_id = self.headers.get("webhook-id")
        with lock:
            status = rules["status"]
            if rules["fail"].get(event_id, 0) > 0:
                rules["fail"][event_id] -= 1
                status = 500
            delay = rules["delay_ms"]
            echo = list(rules["echo"])
        if delay:
            time.sleep(delay / 1000.0)
        record = {
            "path": self.path,
            "webhook_id": event_id,
            "headers": {k.lower(): v for k, v in self.headers.items()},
            # a repeated header is one key above: keep every name to count them
            "header_names": [k.lower() for k in self.headers.keys()],
            "body": body.decode("utf-8", "replace"),
            "status": status,
            "received_at": time.time(),
            "peer_port": self.client_address[1],  # one per connection
        }
        with lock:
            record["seq"] = len(requests) + 1
            requests.append(record)
        if echo:
            text = "".join("%s: %s\r\n" % (h, self.headers.get(h, "")) for h in echo).encode()
            self.send_response(status)
            self.send_header("content-type", "text/plain")
            self.send_header("content-length", str(len(text)))
            self.end_headers()
            self.wfile.write(text)
            return
        self.reply(status, {"ok": 200 <= status < 300})


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--port-file", required=True)
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.daemon_threads = True
    tmp = args.port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write(str(server.server_address[1]))
    os.rename(tmp, args.port_file)
    server.serve_forever()


if __name__ == "__main__":
    main()
