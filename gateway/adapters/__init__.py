"""Model adapters: the only code that talks to a model (Anthropic) or stands in for one (offline)."""
