#!/usr/bin/python3
"""The relay's memory against a NATS server that sends a line that never ends.

    PG_CONFIG=... bench/endless_info.py [SECONDS]

For each way a server can do it (test/fake_nats.py, modes "handshake": the
answer to CONNECT never ends; "connected": after the handshake and the
stream's info, an INFO line never ends), starts a throwaway cluster with
outbox preloaded (PG_CONFIG's PostgreSQL; installed extension), a
JetStream destination naming the fake server (timeout_ms 5000, the
default), emits one event, and samples the relay's resident memory
(VmRSS, VmHWM of /proc/PID/status) every half second for SECONDS (default
20). Prints the figures; they are measurements, not pass/fail. Run as a
user that may run initdb (as root it re-runs itself as postgres).
"""
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
FAKE = os.path.join(HERE, "..", "test", "fake_nats.py")

if os.geteuid() == 0:
    os.execvp("runuser", ["runuser", "-u", "postgres", "--", "env",
                          f"PG_CONFIG={os.environ.get('PG_CONFIG', 'pg_config')}",
                          "/usr/bin/python3", os.path.abspath(__file__), *sys.argv[1:]])

seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 20.0
bindir = subprocess.check_output([os.environ.get("PG_CONFIG", "pg_config"), "--bindir"],
                                 text=True).strip()


def status_kb(pid, field):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def run(mode):
    work = tempfile.mkdtemp(prefix="outbox-endless-")
    data = os.path.join(work, "data")
    pg = lambda *a: subprocess.run([os.path.join(bindir, a[0]), *a[1:]], check=True,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    fake = None
    try:
        pg("initdb", "-D", data, "-A", "trust")
        with open(os.path.join(data, "postgresql.conf"), "a") as f:
            f.write(f"listen_addresses = ''\nunix_socket_directories = '{work}'\n"
                    "shared_preload_libraries = 'outbox'\noutbox.databases = 'postgres'\n")
        pg("pg_ctl", "-D", data, "-l", os.path.join(work, "log"), "-w", "start")

        def sql(q):
            return subprocess.check_output([os.path.join(bindir, "psql"), "-h", work, "-d", "postgres",
                                            "-XAtq", "-c", q], text=True).strip()

        sql("CREATE EXTENSION outbox")
        status = os.path.join(work, "fake.status")
        fake = subprocess.Popen(["/usr/bin/python3", FAKE, mode, status])
        while not (os.path.exists(status) and "port=" in open(status).read()):
            time.sleep(0.05)
        port = open(status).read().split("port=")[1].split()[0]
        relay = ""
        while not relay:
            relay = sql("SELECT pid FROM pg_stat_activity WHERE backend_type = 'outbox relay'")
        before = status_kb(relay, "VmRSS")
        sql("INSERT INTO outbox_destinations (name, event_types, nats_servers, nats_subject, nats_stream) "
            f"VALUES ('fake', 'fake.*', 'nats://127.0.0.1:{port}', 'fake.x', 'FAKE'); "
            "SELECT outbox_emit('fake.one', '{}')")
        peak = 0
        start = time.time()
        samples = []
        while time.time() - start < seconds:
            rss = status_kb(relay, "VmRSS")
            peak = max(peak, rss)
            samples.append((time.time() - start, rss))
            time.sleep(0.5)
        hwm = status_kb(relay, "VmHWM")
        attempts = sql("SELECT attempts || ' attempts, last_error: ' || coalesce(last_error, '') "
                       "FROM outbox WHERE event_type = 'fake.one'")
        print(f"mode {mode}: relay RSS {before / 1024:.0f} MB before the event; "
              f"over {seconds:.0f} s: peak {peak / 1024:.0f} MB (VmHWM {hwm / 1024:.0f} MB), "
              f"at the end {samples[-1][1] / 1024:.0f} MB")
        print("  RSS (MB) each 2 s: " + " ".join(f"{rss / 1024:.0f}" for t, rss in samples[::4]))
        print(f"  the event: {attempts[:200]}")
    finally:
        if fake is not None:
            fake.kill()
            fake.wait()
        subprocess.run([os.path.join(bindir, "pg_ctl"), "-D", data, "-m", "immediate", "stop"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        shutil.rmtree(work, ignore_errors=True)


for m in ("handshake", "connected"):
    run(m)
