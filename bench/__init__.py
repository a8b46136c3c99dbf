"""Benchmarks: each prints one JSON object and measures its baseline in the same run."""

import services  # noqa: F401 - gRPC core's settings before anything imports grpc (services/__init__.py)
