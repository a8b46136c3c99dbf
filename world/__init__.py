"""The reference world server: scenarios, the seeded world loop, run artifacts and reports."""
