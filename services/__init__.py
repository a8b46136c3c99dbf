"""The shared service chassis: settings, logging, errors, auth, server bootstrap and the `egbe` CLI."""
