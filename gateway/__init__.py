"""The cognition gateway: admission, budgets, routing, kill switches, audit, and the only model adapters."""
