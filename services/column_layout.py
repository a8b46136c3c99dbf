"""The columnar wire layout of egbe-protocol (PerceptionColumns and ActionColumns, layout 1).

protos/egbe/v1 documents each `bytes` column's width in a comment; this module is that layout as
numpy dtypes, the one place the kernel (which decodes perception and encodes actions) and the
Python world clients (which do the reverse) read it from. The C++ client packs the same layout by
hand (clients/cpp/world_client.cc) and tests/system checks it against the kernel.
"""

from __future__ import annotations

import numpy as np

from egbe.v1 import perception_pb2

LAYOUT_VERSION = 1
# The `slots` column of a delta frame (and of a delta answer): strictly increasing dense slots.
SLOT_DTYPE = np.dtype("<u4")

NEED_COLUMNS = ("need_safety_bp", "need_sustaining_bp", "need_social_bp", "need_purpose_bp", "fatigue_bp")
MAX_BASIS_POINTS = 10_000

# PerceptionColumns: column name -> little-endian dtype, in field-number order.
PERCEPTION_COLUMNS: dict[str, np.dtype[np.generic]] = {
    "signal_flags": np.dtype("<u2"),  # bit i <=> PerceptionFlagBit i
    "visual_lod": np.dtype("u1"),  # VisualLod
    "player_proximity_mm": np.dtype("<i4"),
    "addressed_by_player_id": np.dtype("<u4"),
    "goal_ref": np.dtype("<u4"),
    "goal_progress_signature": np.dtype("<u8"),
    **{name: np.dtype("<u2") for name in NEED_COLUMNS},
}

# The row form's booleans (PerceptionFrame fields) -> their bit in `signal_flags`.
PERCEPTION_FLAG_BITS: dict[str, int] = {
    "on_screen": perception_pb2.PERCEPTION_FLAG_BIT_ON_SCREEN,
    "open_crossroads": perception_pb2.PERCEPTION_FLAG_BIT_OPEN_CROSSROADS,
    "imminent_irreversible_action": perception_pb2.PERCEPTION_FLAG_BIT_IMMINENT_IRREVERSIBLE_ACTION,
    "scene_copresence": perception_pb2.PERCEPTION_FLAG_BIT_SCENE_COPRESENCE,
    "player_nearby_in_world": perception_pb2.PERCEPTION_FLAG_BIT_PLAYER_NEARBY_IN_WORLD,
    "threat_present": perception_pb2.PERCEPTION_FLAG_BIT_THREAT_PRESENT,
    "minor_present": perception_pb2.PERCEPTION_FLAG_BIT_MINOR_PRESENT,
}

# ActionColumns: column name -> little-endian dtype (`guard_bits` is empty when no guard fired).
ACTION_COLUMNS: dict[str, np.dtype[np.generic]] = {
    "kind": np.dtype("u1"),  # ActionKind
    "source": np.dtype("u1"),  # ActionSource
    "tier": np.dtype("u1"),  # CognitionTier
    "priority": np.dtype("<u2"),
    "goal_ref": np.dtype("<u4"),
    "plan_step": np.dtype("<u2"),
    "tier_reason": np.dtype("u1"),  # TierReason
    "guard_bits": np.dtype("u1"),  # bit 0 repeated-action, bit 1 stale-goal
}
