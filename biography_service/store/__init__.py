"""Storage for the Ori event log: one store interface, one module per backend."""
