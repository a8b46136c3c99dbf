"""A local OTLP/gRPC trace collector that counts and drops what it receives, so a benchmark can run the
services with tracing on (`EGBE_OTEL_ENDPOINT=http://127.0.0.1:PORT`) and no collector of its own.

    python -m bench.otlp_sink --port 4317     # serves until interrupted; prints the spans it took
"""

from __future__ import annotations

import argparse
import signal
import threading
from concurrent import futures
from typing import Any

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc


class _Sink(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self) -> None:
        self.spans = 0
        self._lock = threading.Lock()

    def Export(
        self, request: trace_service_pb2.ExportTraceServiceRequest, context: Any
    ) -> trace_service_pb2.ExportTraceServiceResponse:
        count = sum(len(scope.spans) for resource in request.resource_spans for scope in resource.scope_spans)
        with self._lock:
            self.spans += count
        return trace_service_pb2.ExportTraceServiceResponse()


def serve(port: int) -> tuple[grpc.Server, _Sink]:
    sink = _Sink()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(sink, server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    return server, sink


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--port", type=int, default=4317)
    args = parser.parse_args()
    server, sink = serve(args.port)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    stop.wait()
    server.stop(None)
    print(f'{{"spans_received": {sink.spans}}}')


if __name__ == "__main__":
    main()
