"""The edge: Egbe's protocol over HTTP/JSON and WebSocket, for engines that cannot speak gRPC.

A gRPC client of the services like any world server: every message is translated by the generated
descriptors, the caller's bearer token is forwarded, and the services' own auth, scopes, limits and
errors apply unchanged (docs/edge.md).
"""
