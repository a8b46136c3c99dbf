"""The biography service's tunable limits and defaults: the one source of truth for each number."""

from __future__ import annotations

from pydantic import BaseModel, Field

from services.settings import ChassisSettings


class BiographyConfig(BaseModel):
    """Limits on what an Append may carry, page sizes, and the default rehydration budget."""

    max_batch_events: int = Field(default=1000, gt=0, description="Most events one Append may carry.")
    max_payload_bytes: int = Field(
        default=64 * 1024, gt=0, description="Largest canonical-JSON payload of one event, in bytes."
    )
    max_ori_id_chars: int = Field(default=128, gt=0, description="Longest Ori id accepted.")
    max_provenance_ref_chars: int = Field(default=512, gt=0, description="Longest provenance_ref accepted.")
    default_page_size: int = Field(default=100, gt=0, description="Read page size when none is asked.")
    max_page_size: int = Field(default=1000, gt=0, description="Larger read pages are clamped to this.")
    max_page_bytes: int = Field(
        default=2 * 1024 * 1024,
        gt=0,
        # Half of gRPC's default 4 MiB receive limit: a client with default settings reads any page.
        description="A read page stops before its encoded events pass this many bytes (at least one event).",
    )
    rehydrate_max_events: int = Field(
        default=64, gt=0, description="Default rehydration budget: items loaded into the working context."
    )
    rehydrate_max_chars: int = Field(
        default=8000, gt=0, description="Default rehydration budget: characters of text returned."
    )
    recent_memory_window: int = Field(
        default=2048,
        gt=0,
        # A game-day off-screen at one fragment per game-minute is 1,440 memories; the window must
        # hold a whole day, or the morning's most significant moment is forgotten by evening.
        description="Rehydration ranks by salience among this many most recent memories.",
    )
    subscription_page_size: int = Field(
        default=256, gt=0, description="Events a subscriber reads from storage at a time (its memory bound)."
    )
    subscription_poll_seconds: float = Field(
        default=0.5,
        gt=0,
        description="A caught-up subscriber re-checks storage this often (appends by other processes).",
    )
    sqlite_file: str = Field(default="biography.sqlite3", description="SQLite file name under data_dir.")
    group_commit_max: int = Field(
        default=64, gt=0, description="Most queued appends one writer commits in one transaction."
    )
    postgres_pool_max: int = Field(default=8, gt=0, description="Most PostgreSQL connections in the pool.")


class BiographyServiceSettings(ChassisSettings):
    """What a biography process needs: the chassis settings and the biography service's own."""

    biography: BiographyConfig = Field(
        default_factory=BiographyConfig, description="The Ori event log's limits and defaults."
    )
