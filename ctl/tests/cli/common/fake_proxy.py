# A stand-in for strata-proxy, for testing `strata-ctl daemon` and `demo`
# while the real proxy is being built. The test writes this file as
# DIR/bin/strata-proxy with a `#!PYTHON` line in front.
#
#   strata-proxy CONFIG
#
# Logs its blocked-signal mask at start. Reads `listen` and
# `control_socket` from CONFIG, serves GET /health (200) on `listen`, and on
# SIGINT or SIGTERM logs which signal came and whether the supervisor's
# control socket still accepted a connection, then exits 0.
#
# Environment:
#   STRATA_FAKE_PROXY_LOG   JSON-lines event log (start, signal, exit)
#   STRATA_FAKE_PROXY_EXIT  exit with this status right after start
import json
import os
import signal
import socket
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

with open(sys.argv[1]) as f:
    CONFIG = json.load(f)
LOG = os.environ.get("STRATA_FAKE_PROXY_LOG")


def log(**event):
    event["pid"] = os.getpid()
    if LOG:
        with open(LOG, "a") as f:
            f.write(json.dumps(event) + "\n")


def supervisor_up():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(CONFIG["control_socket"])
        return True
    except OSError:
        return False
    finally:
        s.close()


def blocked_signals():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("SigBlk:"):
                return line.split()[1]
    return None


log(event="start", argv=sys.argv[1:], sigblk=blocked_signals())
if os.environ.get("STRATA_FAKE_PROXY_EXIT"):
    sys.exit(int(os.environ["STRATA_FAKE_PROXY_EXIT"]))


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path == "/health":
            body = b'{"status":"ok","fake_proxy":true}'
            self.send_response(200)
        else:
            body = b'{"error":"not found"}'
            self.send_response(404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


host, port = CONFIG.get("listen", "127.0.0.1:8088").rsplit(":", 1)
server = ThreadingHTTPServer((host, int(port)), Handler)


def stop(signum, frame):
    log(event="signal", signal=signal.Signals(signum).name, supervisor_up=supervisor_up())
    threading.Thread(target=server.shutdown, daemon=True).start()


signal.signal(signal.SIGTERM, stop)
signal.signal(signal.SIGINT, stop)
server.serve_forever()
server.server_close()
log(event="exit")
