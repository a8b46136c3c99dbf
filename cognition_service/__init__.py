"""The cognition pipeline: assemble, ground, dispatch, gate, commit; model calls only via the gateway."""
