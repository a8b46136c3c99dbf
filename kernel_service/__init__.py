"""Moirai: the deterministic per-tick scheduler co-located with a world server."""
