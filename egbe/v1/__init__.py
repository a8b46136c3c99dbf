"""Generated egbe-protocol code; regenerate with scripts/gen_protos.py."""
