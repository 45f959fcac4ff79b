"""An HTTP receiver that only records: every POST's path, headers and body are appended as a
JSON line to the file given as the first argument, and answered 202. tests/interop.rs runs
it for kubecast's HTTP sinks; test_interop.py then decodes what it recorded with the official
CloudEvents SDK. It prints the port it listens on (127.0.0.1) as its first line.
"""

import base64
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

lock = threading.Lock()


class Recorder(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        line = {
            "path": self.path,
            "headers": {k.lower(): v for k, v in self.headers.items()},
            "body": base64.b64encode(body).decode(),
        }
        with lock, open(sys.argv[1], "a", encoding="utf-8") as f:
            f.write(json.dumps(line) + "\n")
        self.send_response(202)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_OPTIONS(self):
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


server = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
print(server.server_address[1], flush=True)
server.serve_forever()
