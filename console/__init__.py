"""The operator console: a web page (Starlette, server-sent events) that reads the services over gRPC
like any client and sends an operator's controls to the gateway with that operator's own token."""
