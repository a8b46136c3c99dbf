"""The test suite."""

import services  # noqa: F401 - gRPC core's settings before anything imports grpc (services/__init__.py)
