"""The webhook receiver the local stack's Alertmanagers notify (scripts/stack: am-webhook).

Appends each notification, as Alertmanager POSTed it, as one JSON line to the file given, with
the path it was POSTed to (`/alertmanager` or `/alertmanager-2`) as `"path"`, and answers 200.
GET /healthz answers `ok`. It listens on the stack's loopback address only.
"""

import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Receiver(BaseHTTPRequestHandler):
    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        try:
            note = json.loads(self.rfile.read(length))
        except ValueError:
            self.send_response(400)
            self.end_headers()
            return
        note["path"] = self.path
        with open(self.server.log_path, "a", encoding="utf-8") as out:
            out.write(json.dumps(note, separators=(",", ":")) + "\n")
        self.send_response(200)
        self.end_headers()

    def do_GET(self):
        ok = self.path == "/healthz"
        self.send_response(200 if ok else 404)
        self.end_headers()
        if ok:
            self.wfile.write(b"ok\n")

    def log_message(self, *args):
        pass


def main():
    host, port, log_path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    server = ThreadingHTTPServer((host, port), Receiver)
    server.log_path = log_path
    server.serve_forever()


if __name__ == "__main__":
    main()
