#!/usr/bin/python3
"""A hostile NATS server on 127.0.0.1, for the JetStream tests and bench.

    fake_nats.py MODE STATUS_FILE

listens on a free port of 127.0.0.1 and writes "port=N" (and, in mode
discover, "other=M") to STATUS_FILE, then keeps it up to date with the
number of connections each listener accepted ("accepted=A other_accepted=B").

Modes:
  discover   INFO names a second listener of this process in connect_urls;
             after the client's CONNECT and PING the first listener closes
             the connection, so that a client that follows connect_urls
             goes to the second, which only counts what it accepts
  handshake  answers the client's CONNECT and PING with a line that never
             ends (instead of PONG)
  connected  completes the handshake, answers JetStream's stream info
             request, then sends an INFO line that never ends

Runs until killed.
"""
import json
import os
import socket
import sys
import threading

mode, status_file = sys.argv[1], sys.argv[2]
lock = threading.Lock()
counts = {"accepted": 0, "other_accepted": 0}
ports = {}


def write_status():
    with lock:
        text = " ".join(f"{k}={v}" for k, v in {**ports, **counts}.items())
    with open(status_file + ".tmp", "w") as f:
        f.write(text + "\n")
    os.replace(status_file + ".tmp", status_file)


def listen():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", 0))
    s.listen(16)
    return s


def info(extra=None):
    i = {"server_id": "FAKE", "server_name": "fake", "version": "2.9.10", "proto": 1,
         "host": "127.0.0.1", "port": ports["port"], "headers": True,
         "max_payload": 1048576, "jetstream": True}
    i.update(extra or {})
    return b"INFO " + json.dumps(i).encode() + b"\r\n"


def endless(conn, start):
    chunk = b"x" * 65536
    try:
        conn.sendall(start)
        while True:
            conn.sendall(chunk)
    except OSError:
        pass


def stream_info(name):
    return json.dumps({
        "type": "io.nats.jetstream.api.v1.stream_info_response",
        "config": {"name": name, "subjects": ["fake.>"], "retention": "limits",
                   "storage": "file", "num_replicas": 1,
                   "duplicate_window": 600 * 10**9},
        "created": "2024-01-01T00:00:00Z",
        "state": {"messages": 0, "bytes": 0, "first_seq": 0, "last_seq": 0,
                  "consumer_count": 0}}).encode()


def serve(conn):
    conn.sendall(info({"connect_urls": [f"127.0.0.1:{ports['other']}"]}
                      if mode == "discover" else None))
    f = conn.makefile("rb")
    sids = {}
    while True:
        line = f.readline()
        if not line:
            return
        if line.startswith(b"PING"):
            if mode == "discover":
                return
            if mode == "handshake":
                endless(conn, b"-ERR '")
                return
            conn.sendall(b"PONG\r\n")
        elif line.startswith(b"SUB "):
            parts = line.split()
            sids[parts[1].decode()] = parts[-1].decode()
        elif line.startswith(b"PUB ") or line.startswith(b"HPUB "):
            parts = line.split()
            size = int(parts[-1])
            f.read(size + 2)
            subject = parts[1].decode()
            reply = parts[2].decode() if len(parts) > (4 if parts[0] == b"HPUB" else 3) else None
            if subject.startswith("$JS.API.STREAM.INFO.") and reply:
                sid = next((s for p, s in sids.items()
                            if reply == p or (p.endswith(".*") and reply.startswith(p[:-1]))), None)
                if sid is not None:
                    body = stream_info(subject[len("$JS.API.STREAM.INFO."):])
                    conn.sendall(b"MSG %s %s %d\r\n%s\r\n" % (reply.encode(), sid.encode(), len(body), body))
                    if mode == "connected":
                        endless(conn, b"INFO {")
                        return


def accept_loop(sock, key, handler):
    while True:
        conn, _ = sock.accept()
        with lock:
            counts[key] += 1
        write_status()
        threading.Thread(target=handler, args=(conn,), daemon=True).start()


def hold(conn):
    try:
        while conn.recv(65536):
            pass
    except OSError:
        pass


def serve_closing(conn):
    try:
        serve(conn)
    except OSError:
        pass
    finally:
        conn.close()


main = listen()
ports["port"] = main.getsockname()[1]
if mode == "discover":
    other = listen()
    ports["other"] = other.getsockname()[1]
    threading.Thread(target=accept_loop, args=(other, "other_accepted", hold), daemon=True).start()
write_status()
accept_loop(main, "accepted", serve_closing)
