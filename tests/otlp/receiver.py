"""An OTLP/HTTP trace receiver for the tests: decodes each protobuf export
with the official `opentelemetry-proto` bindings and serves what it got.

POST /v1/traces  an ExportTraceServiceRequest (application/x-protobuf)
GET  /spans      every span so far, as JSON: ids in hex, attributes as values
GET  /posts      the Content-Type of each export

It prints its port on the first line of stdout, then serves until killed.
"""

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

lock = threading.Lock()
spans = []
posts = []


def value(v):
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [value(x) for x in v.array_value.values]
    if kind is None:
        return None
    return getattr(v, kind)


def decode(request):
    out = []
    for rs in request.resource_spans:
        resource = {a.key: value(a.value) for a in rs.resource.attributes}
        for ss in rs.scope_spans:
            for s in ss.spans:
                out.append(
                    {
                        "service": resource.get("service.name"),
                        "scope": ss.scope.name,
                        "trace_id": s.trace_id.hex(),
                        "span_id": s.span_id.hex(),
                        "parent_span_id": s.parent_span_id.hex(),
                        "name": s.name,
                        "kind": Span.SpanKind.Name(s.kind),
                        "start_ns": s.start_time_unix_nano,
                        "end_ns": s.end_time_unix_nano,
                        "attributes": {a.key: value(a.value) for a in s.attributes},
                        "status": Status.StatusCode.Name(s.status.code),
                        "status_message": s.status.message,
                        "events": [
                            {
                                "name": e.name,
                                "attributes": {a.key: value(a.value) for a in e.attributes},
                            }
                            for e in s.events
                        ],
                    }
                )
    return out


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.path != "/v1/traces":
            self.send_error(404)
            return
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        with lock:
            posts.append(self.headers.get("Content-Type"))
            spans.extend(decode(request))
        answer = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def do_GET(self):
        with lock:
            data = {"/spans": spans, "/posts": posts}.get(self.path)
            answer = None if data is None else json.dumps(data).encode()
        if answer is None:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args):
        pass


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
