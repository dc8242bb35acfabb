"""A small OTLP/HTTP trace receiver for the tests: `python otlp_receiver.py PORT OUT`.

Listens on 127.0.0.1:PORT, accepts `POST /v1/traces` with a protobuf
`ExportTraceServiceRequest` (decoded with the official `opentelemetry-proto` package),
appends one JSON line per span to OUT and answers an empty `ExportTraceServiceResponse`.
A span line: {"trace_id", "span_id", "parent_span_id" (hex, "" for a root), "name",
"kind" (the proto enum name, e.g. "SPAN_KIND_SERVER"), "attributes" {key: value},
"status" (enum name), "links" [{"trace_id", "span_id"}], "service"}.
"""

from __future__ import annotations

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

LOCK = threading.Lock()


def any_value(v):  # opentelemetry.proto.common.v1.AnyValue -> plain JSON
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [any_value(x) for x in v.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: any_value(kv.value) for kv in v.kvlist_value.values}
    if kind == "bytes_value":
        return v.bytes_value.hex()
    return getattr(v, kind) if kind else None


def span_lines(req: ExportTraceServiceRequest) -> list[str]:
    lines = []
    for rs in req.resource_spans:
        resource = {kv.key: any_value(kv.value) for kv in rs.resource.attributes}
        for ss in rs.scope_spans:
            for s in ss.spans:
                lines.append(json.dumps({
                    "trace_id": s.trace_id.hex(),
                    "span_id": s.span_id.hex(),
                    "parent_span_id": s.parent_span_id.hex(),
                    "name": s.name,
                    "kind": Span.SpanKind.Name(s.kind),
                    "attributes": {kv.key: any_value(kv.value) for kv in s.attributes},
                    "status": Status.StatusCode.Name(s.status.code),
                    "links": [{"trace_id": l.trace_id.hex(), "span_id": l.span_id.hex()} for l in s.links],
                    "service": resource.get("service.name"),
                }))
    return lines


class Handler(BaseHTTPRequestHandler):
    out = ""

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path != "/v1/traces" or self.headers.get("Content-Type") != "application/x-protobuf":
            self.send_error(404 if self.path != "/v1/traces" else 415)
            return
        req = ExportTraceServiceRequest()
        req.ParseFromString(body)
        with LOCK, open(self.out, "a") as f:
            for line in span_lines(req):
                f.write(line + "\n")
        answer = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, fmt: str, *args) -> None:
        sys.stderr.write("otlp-receiver: " + (fmt % args) + "\n")


def main() -> None:
    port, out = int(sys.argv[1]), sys.argv[2]
    Handler.out = out
    open(out, "a").close()
    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()


if __name__ == "__main__":
    main()
