#!/usr/bin/env python3
"""The seed lesson's canon, against the real extension.

100 tasks are written twice over. First by a dual-write client: it commits
the task, then publishes the event to the webhook itself; on every tenth task
(i % 10 == 3) the client process dies between the two. Then through the
outbox: the task and outbox_emit() commit together, the client dies at the
same point, and the relay worker delivers. Finally the events of the tasks
whose clients died are redelivered: the consumer sees the same webhook-id
again, so deduplicating by it still counts 100.

Connection: the usual libpq variables (PGHOST, PGPORT, PGDATABASE, PGUSER).
Prints three lines; with --json, one JSON object with the figures instead.
Exits 1 if the outbox lost an event. Ctrl-C stops it without a traceback.
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
import uuid

TASKS = 100
client_pid = None  # the client process in flight, if any


def psql(sql):
    out = subprocess.run(["psql", "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1", "-c", sql],
                         check=True, capture_output=True, text=True)
    return out.stdout.strip()


def http(method, url, body=None, headers=None):
    req = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read() or b"{}")


def on_ctrl_c(signum, frame):
    """Ctrl-C: stops at once, without a traceback. Ends the client in flight
    (one forked just as the signal came missed it, and would fail noisily
    once the demo stops the server), then dies of SIGINT, so that the shell
    that started this stops too."""
    if client_pid:
        try:
            os.kill(client_pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGINT)


def in_child(work):
    """Runs work() in a child process, as a separate client would; returns
    its exit status. A client that 'dies' calls os._exit itself."""
    global client_pid
    # SIGINT waits until client_pid names the new child
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    pid = os.fork()
    if pid == 0:
        try:
            signal.signal(signal.SIGINT, signal.SIG_DFL)  # a client just dies
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
            work()
            os._exit(0)
        except Exception as e:  # the client failed for real
            print(f"client error: {e}", file=sys.stderr)
            os._exit(2)
    client_pid = pid
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    _, status = os.waitpid(pid, 0)
    client_pid = None
    return os.waitstatus_to_exitcode(status)


def crashes(i):
    return i % 10 == 3


def wait_for(cond, timeout=120):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if cond():
            return True
        time.sleep(0.05)
    return False


def main():
    signal.signal(signal.SIGINT, on_ctrl_c)
    ap = argparse.ArgumentParser()
    ap.add_argument("--sink", required=True, help="base URL of the webhook sink")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    sink = args.sink.rstrip("/")

    def stats(path):
        return http("GET", f"{sink}/_stats?path={path}")

    psql("""
        CREATE TABLE IF NOT EXISTS canon_tasks (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                                                client text NOT NULL, n int NOT NULL);
        TRUNCATE canon_tasks;
        DELETE FROM outbox WHERE event_type = 'canon.task_created';
        DELETE FROM outbox_destinations WHERE name = 'canon';
        INSERT INTO outbox_destinations (name, event_types, url)
        VALUES ('canon', 'canon.*', '%s/outbox');
    """ % sink)

    # 1. dual write: commit, then publish; the client dies in between
    for i in range(1, TASKS + 1):
        def dual(i=i):
            psql(f"INSERT INTO canon_tasks (client, n) VALUES ('dual', {i})")
            if crashes(i):
                os._exit(1)
            body = json.dumps({"type": "canon.task_created", "payload": {"n": i}}).encode()
            http("POST", f"{sink}/dual", body,
                 {"content-type": "application/json", "webhook-id": str(uuid.uuid4())})
        in_child(dual)

    # 2. outbox: the event commits with the task; the client dies after COMMIT
    for i in range(1, TASKS + 1):
        def outbox(i=i):
            psql(f"""BEGIN;
                     INSERT INTO canon_tasks (client, n) VALUES ('outbox', {i});
                     SELECT outbox_emit('canon.task_created', jsonb_build_object('n', {i}), 'task', '{i}');
                     COMMIT;""")
            if crashes(i):
                os._exit(1)
        in_child(outbox)

    wait_for(lambda: stats("/outbox")["distinct"] >= TASKS)
    dual_tasks = int(psql("SELECT count(*) FROM canon_tasks WHERE client = 'dual'"))
    outbox_tasks = int(psql("SELECT count(*) FROM canon_tasks WHERE client = 'outbox'"))
    dual_delivered = stats("/dual")["distinct"]
    outbox_delivered = stats("/outbox")["distinct"]

    # 3. redeliver the events of the clients that died
    redelivered = int(psql("""
        SELECT count(*) FILTER (WHERE outbox_redeliver(event_id)) FROM outbox
         WHERE event_type = 'canon.task_created' AND (payload->>'n')::int % 10 = 3"""))
    wait_for(lambda: stats("/outbox")["delivered"] >= outbox_delivered + redelivered)
    after = stats("/outbox")

    figures = {
        "dual_tasks": dual_tasks, "dual_delivered": dual_delivered,
        "outbox_tasks": outbox_tasks, "outbox_delivered": outbox_delivered,
        "redelivered": redelivered, "deliveries": after["delivered"],
        "distinct": after["distinct"],
    }
    if args.json:
        print(json.dumps(figures))
    else:
        print(f"dual write: {dual_tasks} tasks in the database, {dual_delivered} events delivered, "
              f"{dual_tasks - dual_delivered} lost")
        print(f"outbox:     {outbox_tasks} tasks in the database, {outbox_delivered} events delivered, "
              f"{outbox_tasks - outbox_delivered} lost")
        print(f"redelivery: {after['delivered']} deliveries, {after['distinct']} distinct webhook-ids: "
              f"a consumer deduplicating by webhook-id counts {after['distinct']}")
    return 0 if outbox_delivered == outbox_tasks == TASKS else 1


if __name__ == "__main__":
    sys.exit(main())
