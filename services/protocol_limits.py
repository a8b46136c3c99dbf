"""Limits one service refuses a request past and its callers check before calling it, one number each.

A caller that checks a peer's limit first refuses its own request whole, before any work (a model
call, a first write) is spent on it; both sides read the limit from here, so they cannot drift apart.
"""

from __future__ import annotations

# SQLite stores integers as signed 64-bit: every version, position and tick the biography keeps.
STORED_INTEGER_MAX = 2**63 - 1

# Per-request limits of the policy's Ground and ReviewCulturalBackstory: with them a request's
# grounding work is bounded (Sophia is linear in the claims' terms times the items holding each) and
# its answer small. Measured at these limits with every claim term in every item (the worst case):
# about 50 ms of CPU.
GROUND_CLAIMS = 32
GROUND_EVIDENCE = 256
GROUND_CLAIM_CHARS = 600  # a claim's text (a reply's claim is at most 600 characters by its schema)
GROUND_EVIDENCE_CHARS = 2_000  # an evidence item's text
GROUND_ID_CHARS = 128  # claim_id, evidence_id
GROUND_TAGS = 16  # an item's tags, a claim's required_tags
GROUND_TAG_CHARS = 64
GROUND_LOCALE_CHARS = 35
