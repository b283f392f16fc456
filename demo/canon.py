#!/usr/bin/env python3
"""The seed lesson's canon, against the real extension.

100 tasks are written twice over. First by a dual-write client: it commits
the task, then publishes the event to the webhook itself; on every tenth task
(i % 10 == 3) the client process dies between the two. Then through the
outbox: the task and outbox_emit() commit together, the client dies at the
same point, and the relay worker delivers. Finally the events of the tasks
whose clients died are redelivered: the consumer sees the same webhook-id
again, so deduplicating by it still counts 100.

With --bullmq-tool (test/bullmq_tool.js, with npm bullmq on NODE_PATH), the
lesson's own queue too: BullMQ's migrations make its schema in the same
database, a BullMQ destination takes 100 more tasks' events (every tenth
client dies after COMMIT again), the relay is killed with SIGKILL after the
50th, and a real BullMQ Worker then processes the queue: 100 jobs, none
twice.

Connection: the usual libpq variables (PGHOST, PGPORT, PGDATABASE, PGUSER).
Prints three lines (four with --bullmq-tool); with --json, one JSON object
with the figures instead.
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


def outbox_client(client, event_type, i):
    """A client that commits task i and its event together, and dies after
    COMMIT on every tenth task."""
    psql(f"""BEGIN;
             INSERT INTO canon_tasks (client, n) VALUES ('{client}', {i});
             SELECT outbox_emit('{event_type}', jsonb_build_object('n', {i}), 'task', '{i}');
             COMMIT;""")
    if crashes(i):
        os._exit(1)


def wait_for(cond, timeout=120):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if cond():
            return True
        time.sleep(0.05)
    return False


def node(tool, command):
    """Runs the BullMQ helper with command (a dict) on its stdin; its JSON answer."""
    out = subprocess.run(["node", tool], input=json.dumps(command), check=True,
                         capture_output=True, text=True)
    return json.loads(out.stdout)


def relay_pid():
    """The relay's pid, or None while there is none (or no server yet)."""
    try:
        return psql("SELECT pid FROM pg_stat_activity WHERE backend_type = 'outbox relay'") or None
    except subprocess.CalledProcessError:
        return None


def bullmq_canon(tool):
    """100 tasks whose events go to a BullMQ queue in the same database, the
    relay killed after the 50th; returns the figures of a Worker's run."""
    connection = {"host": os.environ.get("PGHOST", "/var/run/postgresql"),
                  "port": int(os.environ.get("PGPORT", "5432")),
                  "database": os.environ.get("PGDATABASE", "postgres"), "schema": "bullmq"}
    if os.environ.get("PGUSER"):
        connection["user"] = os.environ["PGUSER"]
    node(tool, {"command": "migrate", "connection": connection, "queue": "canon"})
    psql("""
        DELETE FROM outbox_destinations WHERE name = 'canon-jobs';
        DELETE FROM bullmq.job WHERE queue = 'canon';
        INSERT INTO outbox_destinations (name, kind, event_types, options)
        VALUES ('canon-jobs', 'bullmq', 'canon.job_*', '{"queue": "canon"}');
    """)
    for i in range(1, TASKS + 1):
        if i == TASKS // 2 + 1:
            # SIGKILL: the server ends every session and starts again
            old = relay_pid()
            if old:
                os.kill(int(old), signal.SIGKILL)
                wait_for(lambda: relay_pid() not in (None, old))
        in_child(lambda i=i: outbox_client("bullmq", "canon.job_created", i))
    wait_for(lambda: int(psql("SELECT count(*) FROM bullmq.job WHERE queue = 'canon'")) >= TASKS)
    worked = node(tool, {"command": "work", "connection": connection, "queue": "canon",
                         "count": TASKS, "concurrency": 4, "timeout_ms": 60000})
    ids = [job["id"] for job in worked["jobs"]]
    return {"bullmq_tasks": int(psql("SELECT count(*) FROM canon_tasks WHERE client = 'bullmq'")),
            "bullmq_processed": len(set(ids)), "bullmq_duplicates": len(ids) - len(set(ids))}


def main():
    signal.signal(signal.SIGINT, on_ctrl_c)
    ap = argparse.ArgumentParser()
    ap.add_argument("--sink", required=True, help="base URL of the webhook sink")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--bullmq-tool", help="test/bullmq_tool.js: also the BullMQ line")
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
        in_child(lambda i=i: outbox_client("outbox", "canon.task_created", i))

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
    if args.bullmq_tool:
        figures.update(bullmq_canon(args.bullmq_tool))
    if args.json:
        print(json.dumps(figures))
    else:
        print(f"dual write: {dual_tasks} tasks in the database, {dual_delivered} events delivered, "
              f"{dual_tasks - dual_delivered} lost")
        print(f"outbox:     {outbox_tasks} tasks in the database, {outbox_delivered} events delivered, "
              f"{outbox_tasks - outbox_delivered} lost")
        print(f"redelivery: {after['delivered']} deliveries, {after['distinct']} distinct webhook-ids: "
              f"a consumer deduplicating by webhook-id counts {after['distinct']}")
        if args.bullmq_tool:
            print(f"bullmq:     {figures['bullmq_tasks']} tasks in the database, relay killed after 50, "
                  f"{figures['bullmq_processed']} jobs processed by a BullMQ Worker, "
                  f"{figures['bullmq_duplicates']} twice")
    if args.bullmq_tool and not (figures["bullmq_processed"] == figures["bullmq_tasks"] == TASKS
                                 and figures["bullmq_duplicates"] == 0):
        return 1
    return 0 if outbox_delivered == outbox_tasks == TASKS else 1


if __name__ == "__main__":
    sys.exit(main())
