"""Routing evidence: the shipped eval suites, their deterministic scoring, and the runner that records
each model's score per suite in the gateway store, where routing reads it."""
