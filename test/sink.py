#!/usr/bin/env python3
"""A webhook endpoint for the tests and the demo, on 127.0.0.1 only.

It records every POST it receives and answers according to rules set through
its control API, so that a test can make it fail, fail some events a number
of times, or answer slowly:

  POST /_control  {"status": 503}                  answer every event with 503
                  {"fail": {"<event-id>": 1}}       fail that event once (500)
                  {"fail_status": 400}              the status of those failures
                  {"delay_ms": 3000}                wait before answering
                  {"location": "http://..."}        a Location header in every answer
                  {"echo": ["authorization", "x-tenant"]}
                                                    answer with those request
                                                    headers as "name: value" lines
                  {"paths": {"/p": RULE, ...}}      rules for one path each
                  {"hold_ids": ["<event-id>"]}      hold the requests of those events
                                                    (any path) while they are listed
                  {"release": "/p"}                 answer the requests to /p
                                                    held so far; later ones are
                                                    held while the rule holds
                  (each key given replaces that key's value; "paths" as a whole)
  GET  /_requests  every request answered: webhook-id, headers, header_names
                   (every header name as sent, repeats included), body, status,
                   received_at (arrival, Unix time), answered_at, ended,
                   ended_at, peer_port
  GET  /_arrivals  every request received, answered or not (status null while
                   it waits, 0 if the client went away before the answer)
  GET  /_stats     {"requests": n, "delivered": n, "distinct": n,
                    "arrived": n, "in_flight": n}
                   (all three take ?path=/p to see the requests to one path only)
  POST /_reset     forget requests and rules

A RULE for one path overrides the global status and delay_ms, and may add:
  "fail_rate": 0.2           answer that share of requests with 503 instead,
                             at random (reproducibly: "seed" in /_control
                             starts the sequence again)
  "retry_after": "2"         a Retry-After header, sent as given
  "retry_after_in": 3        a Retry-After HTTP-date at least 3 s after the answer
  "drip_ms": 500             the body goes out one byte per 500 ms after the
  "drip_bytes": 40           headers: 40 bytes (content-length), or without
                             drip_bytes an endless chunked body
  "hold": true               answer only once the rule no longer holds (a
                             later /_control); a client that goes away meanwhile
                             is recorded with status 0
  "script": [RULE, ...]      the next requests to the path take these rules in
                             turn (each instead of the path's own, no "hold"),
                             then the path's own rule applies again
A record's "ended" says how its answer ended (and "ended_at" when): "complete",
or "aborted" when the client went away first (a dripping body cut by the
client's time limit).

Usage: sink.py --port-file FILE [--tls-cert PEM --tls-key PEM]
(the chosen port is written to FILE once the server listens; it runs until
killed). With a certificate and its key, that port speaks https, and a
second port, written after the first, serves the same endpoint in plain
http, for the control API.
"""
import argparse
import email.utils
import json
import math
import os
import random
import select
import socket
import ssl
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

lock = threading.Lock()
changed = threading.Condition(lock)  # notified when the rules change
requests = []  # answered, in answer order
arrivals = []  # received, in arrival order (the same dicts)
DEFAULT_RULES = {"status": 200, "fail": {}, "delay_ms": 0, "paths": {}, "echo": [],
                 "hold_ids": []}
rules = json.loads(json.dumps(DEFAULT_RULES))
arrived = {}  # path -> how many requests to it have arrived
released = {}  # path -> how many of its first arrivals a "release" let go
chance = random.Random(0)  # for "fail_rate"


def rule_for(path, consume):
    """The rule that applies to the next answer on path (lock held)."""
    rule = {"status": rules["status"], "delay_ms": rules["delay_ms"],
            "location": rules.get("location")}
    own = rules["paths"].get(path) or {}
    script = own.get("script") or []
    if consume and script:
        rule.update({k: v for k, v in script.pop(0).items() if k != "hold"})
    else:
        rule.update({k: v for k, v in own.items() if k != "script"})
    return rule


def held(rule, seq, path, event_id):
    """Whether the answer to the seq-th request to path waits (lock held)."""
    return ((rule.get("hold") and seq >= released.get(path, 0))
            or event_id in rules["hold_ids"])


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the relay expects

    def setup(self):
        super().setup()
        # headers and body go out in two writes: without this, Nagle's
        # algorithm holds the body until the client's delayed ACK (~40 ms)
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, fmt, *args):
        pass

    def reply(self, status, obj=None, extra_headers=()):
        body = json.dumps(obj if obj is not None else {}).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        for name, value in extra_headers:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def read_body(self):
        length = int(self.headers.get("content-length", "0"))
        return self.rfile.read(length) if length else b""

    def client_gone(self):
        """Whether the client closed its end (it sends nothing else while it waits)."""
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            return bool(readable) and self.connection.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True

    def do_GET(self):
        url = urlsplit(self.path)
        only = parse_qs(url.query).get("path", [None])[0]
        with lock:
            mine = [r for r in requests if only is None or r["path"] == only]
            came = [r for r in arrivals if only is None or r["path"] == only]
            if url.path == "/_requests":
                return self.reply(200, mine)
            if url.path == "/_arrivals":
                return self.reply(200, came)
            if url.path == "/_stats":
                ok = [r for r in mine if 200 <= r["status"] < 300]
                return self.reply(200, {
                    "requests": len(mine),
                    "delivered": len(ok),
                    "distinct": len({r["webhook_id"] for r in ok}),
                    "arrived": len(came),
                    "in_flight": len([r for r in came if r["status"] is None]),
                })
        self.reply(404)

    def do_POST(self):
        body = self.read_body()
        if self.path == "/_control":
            with lock:
                new = json.loads(body)
                path = new.pop("release", None)
                if path is not None:
                    released[path] = arrived.get(path, 0)
                if "seed" in new:
                    chance.seed(new.pop("seed"))
                rules.update(new)
                changed.notify_all()
            return self.reply(200, rules)
        if self.path == "/_reset":
            with lock:
                requests.clear()
                arrivals.clear()
                rules.clear()
                rules.update(json.loads(json.dumps(DEFAULT_RULES)))
                arrived.clear()
                released.clear()
                changed.notify_all()
            return self.reply(200)

        event_id = self.headers.get("webhook-id")
        record = {
            "path": self.path,
            "webhook_id": event_id,
            "headers": {k.lower(): v for k, v in self.headers.items()},
            # a repeated header is one key above: keep every name to count them
            "header_names": [k.lower() for k in self.headers.keys()],
            "body": body.decode("utf-8", "replace"),
            "status": None,
            "received_at": time.time(),
            "answered_at": None,
            "ended": None,
            "ended_at": None,
            "peer_port": self.client_address[1],  # one per connection
        }
        with lock:
            seq = arrived.get(self.path, 0)
            arrived[self.path] = seq + 1
            arrivals.append(record)
            rule = rule_for(self.path, consume=True)
            status = rule["status"]
            if rules["fail"].get(event_id, 0) > 0:
                rules["fail"][event_id] -= 1
                status = rules.get("fail_status", 500)
            elif rule.get("fail_rate") and chance.random() < rule["fail_rate"]:
                status = 503
            echo = list(rules["echo"])
            # held: wait until a later /_control lifts the hold
            while held(rule, seq, self.path, event_id):
                changed.wait(0.05)
                if self.client_gone():
                    break
                rule = rule_for(self.path, consume=False)
            gone = held(rule, seq, self.path, event_id)
        if gone:
            return self.answered(record, 0, "aborted", close=True)
        if rule["delay_ms"]:
            time.sleep(rule["delay_ms"] / 1000.0)

        extra = []
        if rule.get("location"):
            extra.append(("location", rule["location"]))
        if "retry_after" in rule:
            extra.append(("retry-after", str(rule["retry_after"])))
        if "retry_after_in" in rule:
            at = math.ceil(time.time() + rule["retry_after_in"])
            extra.append(("retry-after", email.utils.formatdate(at, usegmt=True)))
        if rule.get("drip_ms"):
            return self.drip(record, status, rule, extra)
        self.answered(record, status, None)
        try:
            if echo:
                text = "".join("%s: %s\r\n" % (h, self.headers.get(h, "")) for h in echo).encode()
                self.send_response(status)
                self.send_header("content-type", "text/plain")
                self.send_header("content-length", str(len(text)))
                self.end_headers()
                self.wfile.write(text)
            else:
                self.reply(status, {"ok": 200 <= status < 300}, extra)
            self.ended(record, "complete")
        except OSError:
            self.ended(record, "aborted")

    def answered(self, record, status, ended, close=False):
        with lock:
            record["status"] = status
            record["answered_at"] = time.time()
            if ended:
                record["ended"] = ended
                record["ended_at"] = record["answered_at"]
            record["seq"] = len(requests) + 1
            requests.append(record)
        if close:
            self.close_connection = True

    def ended(self, record, how):
        with lock:
            record["ended"] = how
            record["ended_at"] = time.time()

    def drip(self, record, status, rule, extra):
        """Headers at once, then the body one byte per drip_ms."""
        total = rule.get("drip_bytes")
        self.send_response(status)
        self.send_header("content-type", "text/plain")
        if total:
            self.send_header("content-length", str(total))
        else:
            self.send_header("transfer-encoding", "chunked")
        for name, value in extra:
            self.send_header(name, value)
        self.answered(record, status, None)
        sent = 0
        try:
            self.end_headers()
            while not total or sent < total:
                time.sleep(rule["drip_ms"] / 1000.0)
                self.wfile.write(b"x" if total else b"1\r\nx\r\n")
                self.wfile.flush()
                sent += 1
            self.ended(record, "complete")
        except OSError:
            self.ended(record, "aborted")
            self.close_connection = True


class Server(ThreadingHTTPServer):
    daemon_threads = True
    # socketserver's default listen backlog is 5: the relays open up to
    # outbox.http_max_connections each at once, and a connection that finds
    # the accept queue full waits for SYN-ACK retransmits (1, 2, 4 s...),
    # past a request's time limit on a busy machine. nginx's default.
    request_queue_size = 511

    def handle_error(self, request, client_address):
        # a client that goes away (a relay killed, a time limit) or refuses
        # the certificate is expected
        if not isinstance(sys.exc_info()[1], (ConnectionError, ssl.SSLError)):
            super().handle_error(request, client_address)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--port-file", required=True)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--tls-cert")
    parser.add_argument("--tls-key")
    args = parser.parse_args()
    server = Server(("127.0.0.1", args.port), Handler)
    ports = [server.server_address[1]]
    if args.tls_cert:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(args.tls_cert, args.tls_key)
        # the handshake happens in the request's thread, not in accept
        server.socket = ctx.wrap_socket(server.socket, server_side=True,
                                        do_handshake_on_connect=False)
        plain = Server(("127.0.0.1", 0), Handler)
        ports.append(plain.server_address[1])
        threading.Thread(target=plain.serve_forever, daemon=True).start()
    tmp = args.port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write(" ".join(str(p) for p in ports))
    os.rename(tmp, args.port_file)
    server.serve_forever()


if __name__ == "__main__":
    main()
