"""The behaviour layer: HTN plans, personality trees, needs, emotion and arbitration, at kernel speed.

The layer itself is `kernel_service.behavior.layer`. This package imports nothing on its own, so a
process that only reads the method vocabulary (`htn`: the cognition service's output schemas, the
gateway's offline adapter) does not load numpy and its BLAS threads.
"""
