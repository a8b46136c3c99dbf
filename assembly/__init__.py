"""The composition root: assembles the services into the `egbe` command.

It joins every service's settings into one, starts services in one process wired to each other, and
runs the world's commands against them. It may import every package; nothing imports it but tests,
benchmarks and scripts, so the services, the chassis (`services/`) and the world stand side by side.
"""

# The chassis first: it sets gRPC core's transport, which is read once, when grpc is first imported.
import services  # noqa: F401
