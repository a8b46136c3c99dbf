"""Gateway configuration with the seed's defaults: budgets, world cap, routing, prices, storage, adapters."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from services import vocabulary
from services.settings import ChassisSettings

# The protocol's tier names (services.vocabulary), where the gateway's modules look for them.
TIER_NAMES = vocabulary.TIER_NAMES
TIERS_BY_NAME = vocabulary.TIERS_BY_NAME

# The eval gate every routing change must re-run (validateMoiraiModelRoutingConfig).
AGENT_BEHAVIOR_EVAL_GATE = "verify:v6 agent-behavior-evals"


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class TierTokenBudgets(_Frozen):
    """Per-tier token caps: Clotho per active-minute, Lachesis per reflection, Atropos per game-day."""

    clotho: int = Field(default=50_000, gt=0, description="Tokens per Clotho active-minute.")
    lachesis: int = Field(default=10_000, gt=0, description="Tokens per Lachesis reflection.")
    atropos: int = Field(default=15_000, gt=0, description="Tokens per Atropos game-day.")

    def cap_for(self, tier: int) -> int:
        return int(getattr(self, TIER_NAMES[tier]))


class BudgetConfig(_Frozen):
    """The two-stage budget: tier clamps, then the per-Solo-world cap."""

    tier_budgets: TierTokenBudgets = Field(default_factory=TierTokenBudgets)
    world_cap_tokens_per_hour: int = Field(
        default=96_000_000, gt=0, description="Per-Solo-world cognition cap, tokens per real hour."
    )
    homestead_rest_bp: int = Field(
        default=10_000, gt=0, le=10_000, description="Pace multiplier on the cap; can only lower it."
    )


class RunBudget(_Frozen):
    """One run's agentic budget: model calls, tool calls and tokens (the run's ledger reservation)."""

    max_model_calls: int = Field(gt=0)
    max_tool_calls: int = Field(ge=0)
    max_tokens: int = Field(gt=0)


class RunBudgets(_Frozen):
    """Per-tier agentic budgets (MOIRAI_DEFAULT_TIER_BUDGETS): reflexive Clotho to deliberate Atropos."""

    clotho: RunBudget = RunBudget(max_model_calls=2, max_tool_calls=2, max_tokens=4_000)
    lachesis: RunBudget = RunBudget(max_model_calls=6, max_tool_calls=8, max_tokens=16_000)
    atropos: RunBudget = RunBudget(max_model_calls=16, max_tool_calls=24, max_tokens=64_000)

    def for_tier(self, tier: int) -> RunBudget:
        budget: RunBudget = getattr(self, TIER_NAMES[tier])
        return budget


class ModelCandidate(_Frozen):
    """A routable model class: its size rank, on or off. Its quality is what its route's targets scored
    on each eval suite, recorded in the store by `egbe eval` (docs/gateway.md "Routing and cost")."""

    model_class: str = Field(min_length=1, description="Class alias, e.g. 'sonnet-class'.")
    size_rank: int = Field(ge=0, description="Smaller is cheaper; routing picks the smallest qualified.")
    enabled: bool = True


class TierRoute(_Frozen):
    """One tier's bar: the eval suite, the score required, and the model class selected for it."""

    eval_suite: str = Field(min_length=1, description="The shipped eval suite the tier is scored on.")
    required_quality_bp: int = Field(
        ge=0, le=10_000, description="The recorded score (basis points) the selected class must reach."
    )
    selected_model_class: str = Field(
        min_length=1, description="The operator's choice: the smallest enabled class that clears the bar."
    )


def _default_candidates() -> list[ModelCandidate]:
    classes = ("haiku-class", "sonnet-class", "opus-class")
    return [ModelCandidate(model_class=name, size_rank=rank) for rank, name in enumerate(classes, start=1)]


class ModelTarget(_Frozen):
    """Where a model class's calls go: a provider of the providers table and the model id it serves."""

    provider: str = Field(min_length=1)
    model_id: str = Field(min_length=1)


class RoutingConfig(_Frozen):
    """Smallest-qualified routing: candidates, each tier's bar, re-run scripts, class -> concrete model id."""

    candidates: list[ModelCandidate] = Field(default_factory=_default_candidates)
    clotho: TierRoute = TierRoute(
        eval_suite="social-judgment-live-dialogue",
        required_quality_bp=9_500,
        selected_model_class="opus-class",
    )
    lachesis: TierRoute = TierRoute(
        eval_suite="offscreen-reflection-coherence",
        required_quality_bp=9_000,
        selected_model_class="sonnet-class",
    )
    atropos: TierRoute = TierRoute(
        eval_suite="narrative-summary-continuity",
        required_quality_bp=8_000,
        selected_model_class="haiku-class",
    )
    rerun_scripts: list[str] = Field(default_factory=lambda: [AGENT_BEHAVIOR_EVAL_GATE])
    model_ids: dict[str, str] = Field(
        default_factory=lambda: {
            "opus-class": "claude-opus-4-7",
            "sonnet-class": "claude-sonnet-4-6",
            "haiku-class": "claude-haiku-4-5",
        },
        description="Class alias -> concrete Anthropic model id (with no providers table).",
    )
    class_targets: dict[str, list[ModelTarget]] = Field(
        default_factory=dict,
        description="With a providers table: class alias -> its route, the targets tried in order, each"
        " after the one before failed transiently (every candidate class needs one; model_ids is then"
        " unused).",
    )

    def route_for(self, tier: int) -> TierRoute:
        route: TierRoute = getattr(self, TIER_NAMES[tier])
        return route


class ClassPrice(_Frozen):
    """Billed price of one model class, micro-USD per million tokens of each kind."""

    input_per_mtok: int = Field(ge=0)
    output_per_mtok: int = Field(ge=0)
    cache_read_per_mtok: int = Field(ge=0)
    cache_write_per_mtok: int = Field(ge=0)


def _default_prices() -> dict[str, ClassPrice]:
    # Anthropic list prices (USD per MTok x 1e6); cache reads 0.1x input, 5-minute cache writes 1.25x.
    return {
        "opus-class": ClassPrice(
            input_per_mtok=5_000_000,
            output_per_mtok=25_000_000,
            cache_read_per_mtok=500_000,
            cache_write_per_mtok=6_250_000,
        ),
        "sonnet-class": ClassPrice(
            input_per_mtok=3_000_000,
            output_per_mtok=15_000_000,
            cache_read_per_mtok=300_000,
            cache_write_per_mtok=3_750_000,
        ),
        "haiku-class": ClassPrice(
            input_per_mtok=1_000_000,
            output_per_mtok=5_000_000,
            cache_read_per_mtok=100_000,
            cache_write_per_mtok=1_250_000,
        ),
    }


class CostConfig(_Frozen):
    """Class-rate estimates (micro-USD per 1k tokens over len/4) and the billed price table."""

    class_rates_per_1k: dict[str, int] = Field(
        default_factory=lambda: {"opus-class": 1_500, "sonnet-class": 300, "haiku-class": 75}
    )
    prices: dict[str, ClassPrice] = Field(default_factory=_default_prices)
    batch_discount_bp: int = Field(
        default=5_000, ge=0, le=10_000, description="Share of the price a Message Batches call pays."
    )


class RetryPolicy(_Frozen):
    """A provider's request timeout and our one retry loop over it (the SDKs' own retries are off)."""

    request_timeout_seconds: float = Field(default=60.0, gt=0)
    max_attempts: int = Field(default=4, ge=1, description="Attempts per call including the first.")
    backoff_base_seconds: float = Field(default=0.5, gt=0)
    backoff_max_seconds: float = Field(default=20.0, gt=0)


class AnthropicConfig(RetryPolicy):
    """The Anthropic adapter: timeouts and our one retry loop (with no providers table), caching, batches."""

    prompt_caching: bool = Field(default=True, description="cache_control on the stable system block.")
    batches_enabled: bool = Field(
        default=False, description="Send deferrable Atropos work through Message Batches (50% price)."
    )
    batch_poll_seconds: float = Field(default=5.0, gt=0)
    batch_max_wait_seconds: float = Field(
        default=3_600.0, gt=0, description="A batch not ended by then is cancelled."
    )
    count_tokens: bool = Field(default=True, description="Exact input counts from count-tokens.")


ProviderKind = Literal["anthropic", "openai-compatible", "offline"]


class ProviderConfig(RetryPolicy):
    """One model provider of the providers table, by name; the gateway holds one client for it. Its own
    timeout and retry settings apply (`anthropic.*` keeps only the Anthropic-only options)."""

    kind: ProviderKind
    base_url: str = Field(
        default="",
        description="The API root ('http://host:8000/v1' for an openai-compatible server); '' = the SDK's"
        " default (Anthropic's, or ANTHROPIC_BASE_URL).",
    )
    api_key_env: str = Field(
        default="",
        description="The environment variable holding the provider's key, which must be set at start;"
        " '' = a server that takes no key (an anthropic provider always needs one).",
    )
    structured_output: Literal["json_schema", "json_object"] = Field(
        default="json_schema",
        description="openai-compatible: send the mode's JSON Schema as response_format json_schema, or ask"
        " only for a JSON object (json_object) where the server has no schema support; the cognition"
        " service validates every reply against the schema either way.",
    )
    output_limit_field: Literal["max_tokens", "max_completion_tokens"] = Field(
        default="max_tokens",
        description="openai-compatible: the request field carrying the output cap; OpenAI's reasoning"
        " models take only max_completion_tokens, which some local servers do not know.",
    )
    strict_schema: bool = Field(
        default=False,
        description="openai-compatible json_schema: ask for strict adherence (OpenAI's strict mode needs"
        " every property required, which the optional fields of our schemas are not).",
    )
    prices: dict[str, ClassPrice] = Field(
        default_factory=dict,
        description="Model id -> billed price at this provider; a model without one is billed at its"
        " class's price (cost.prices).",
    )
    requests_per_minute: int = Field(
        default=0,
        ge=0,
        description="Requests this provider takes a minute, shared by every gateway on the store (0: no"
        " limit); a call waits its turn before it leaves, and is deferred when none comes before its"
        " deadline.",
    )
    tokens_per_minute: int = Field(
        default=0,
        ge=0,
        description="Tokens this provider takes a minute (each call counts its prompt estimate and its"
        " output cap, as providers' own limiters do), shared like requests_per_minute (0: no limit).",
    )

    rate_burst_seconds: float = Field(
        default=6.0,
        ge=0,
        le=60,
        description="How far ahead a provider's rate schedule may be booked before a call waits: paced at"
        " its limits, it takes up to this many seconds' worth at once after an idle spell (0: strict"
        " pacing).",
    )

    @property
    def rate_limited(self) -> bool:
        return bool(self.requests_per_minute or self.tokens_per_minute)


class LeaseConfig(_Frozen):
    """How a gateway leases blocks of a world's cap from the shared ledger and admits runs from them in
    memory (docs/gateway.md "Durability")."""

    chunk_tokens: int = Field(
        default=1_000_000, gt=0, description="The most one lease takes from a world's window at once."
    )
    share_bp: int = Field(
        default=2_500,
        gt=0,
        le=10_000,
        description="A lease takes at most this share of what no gateway has leased yet (never less than"
        " the run that asked needs), so gateways sharing a ledger near the cap leave room to each other.",
    )
    refill_below_bp: int = Field(
        default=5_000,
        ge=0,
        le=10_000,
        description="Once an admission leaves a lease holding less than this share of chunk_tokens, the next"
        " chunk is leased in the background while admissions go on drawing on what is left (0: lease only"
        " when a run does not fit).",
    )
    idle_return_seconds: float = Field(
        default=5.0, gt=0, description="A lease no admission drew on for this long is returned to the ledger."
    )
    holder: str = Field(
        default="",
        max_length=200,
        description="This gateway's lease holder id, unique among live gateways sharing a store and the same"
        " across its restarts (a restart settles what its previous life left leased); '' = host:data_dir.",
    )


class GatewayConfig(_Frozen):
    """Everything the gateway reads at start; refused whole when any part is invalid."""

    budget: BudgetConfig = Field(default_factory=BudgetConfig)
    run_budgets: RunBudgets = Field(default_factory=RunBudgets)
    routing: RoutingConfig = Field(default_factory=RoutingConfig)
    cost: CostConfig = Field(default_factory=CostConfig)
    anthropic: AnthropicConfig = Field(default_factory=AnthropicConfig)
    providers: dict[str, ProviderConfig] = Field(
        default_factory=dict,
        description="Model providers by name, each class routed to them by routing.class_targets; empty ="
        " Anthropic when ANTHROPIC_API_KEY is set, else the offline adapter.",
    )
    ledger_window_seconds: int = Field(default=3_600, gt=0, description="The world cap's accounting window.")
    run_timeout_seconds: float = Field(
        default=300.0, gt=0, description="A run not ended by then is timed out and its reservation released."
    )
    sweep_interval_seconds: float = Field(default=5.0, gt=0)
    sqlite_file: str = Field(default="gateway.sqlite3", description="Embedded store under data_dir.")
    sqlite_synchronous: Literal["FULL", "NORMAL"] = Field(
        default="FULL",
        description="FULL fsyncs every commit; NORMAL (WAL) survives a process crash but not a power loss.",
    )
    store_timeout_seconds: float = Field(
        default=5.0, gt=0, description="A store operation slower than this fails closed (UNAVAILABLE)."
    )
    postgres_poll_wait_us: int = Field(
        default=500,
        ge=0,
        le=100_000,
        description="While waiting for PostgreSQL's answer, the event loop keeps polling rather than"
        " sleeping for up to this long (waking a sleeping thread costs about 100 µs on a virtual machine;"
        " 0: sleep at once).",
    )
    retention_policy_id: str = "v1:audit-platform:retention:cognition-call"
    safety_policy_id: str = "v1:isis-behavior-policy"
    retry_stats_window: int = Field(default=100, gt=0, description="Runs rolled up by GetRetryStats.")
    rate_limit_max_wait_seconds: float = Field(
        default=30.0,
        gt=0,
        description="The longest a model call with no deadline of its own waits for its provider's turn"
        " under providers.*.requests_per_minute / tokens_per_minute before it is deferred.",
    )
    lease: LeaseConfig = Field(default_factory=LeaseConfig)


class GatewayServiceSettings(ChassisSettings):
    """What a gateway process needs: the chassis settings and the gateway service's own."""

    gateway: GatewayConfig = Field(
        default_factory=GatewayConfig, description="The cognition gateway: budgets, routing, prices, store."
    )
