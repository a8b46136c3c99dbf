"""The shared service chassis: settings, logging, errors, auth, channels and server bootstrap.

Importing it sets gRPC core's transport for the process, which is why every entry point (the `egbe`
CLI, `python -m assembly.cli`, the benchmarks and the tests) imports this package before grpc:
gRPC core reads `GRPC_EXPERIMENTS` once, when grpc is first imported, and ignores it after.
"""

import os

# gRPC core's EventEngine endpoints do each socket's I/O on a pool thread and hand every message to the
# completion queue's thread: one more thread woken per message, and waking a thread is the dearest thing
# on a virtual machine (about 100 us where this was measured). With them off, the completion queue's own
# poller reads and writes the sockets. A bare grpc.aio stream round trip: 0.22-0.31 ms against
# 0.37-0.48 ms, for less CPU on both sides (docs/performance.md, "Design decisions kept").
# An operator's own GRPC_EXPERIMENTS replaces this setting whole.
GRPC_CORE_EXPERIMENTS = ",".join(
    f"-{experiment}"
    for experiment in (
        "event_engine_client",
        "event_engine_listener",
        "event_engine_for_all_other_endpoints",
        "event_engine_callback_cq",
    )
)
os.environ.setdefault("GRPC_EXPERIMENTS", GRPC_CORE_EXPERIMENTS)
