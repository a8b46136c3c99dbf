"""The adapter interface: one model call in, one reply with its usage out."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from gateway.cost import Usage
from gateway.provider_errors import ProviderAttempt


@dataclass(frozen=True)
class UntrustedPart:
    """Content without authority (persona, memories, story state...), tagged with its zone kind name."""

    kind: str
    content: str


@dataclass(frozen=True)
class ModelRequest:
    """One model call as the adapters see it; authority lives only in the first three fields."""

    system_policy: str
    task_instruction: str
    tool_grants: tuple[str, ...] = ()
    untrusted: tuple[UntrustedPart, ...] = ()
    mode: str = "dialogue"
    output_schema: str = ""
    max_output_tokens: int = 1_024
    model_class: str = ""
    concrete_model_id: str = ""
    # Atropos work no player waits for: may go through Message Batches when enabled.
    deferrable: bool = False
    request_id: str = ""
    # The caller's deadline on the monotonic clock (None: none): no provider attempt outlasts it.
    deadline: float | None = None

    def prompt_text(self) -> str:
        """Every prompt part in order, for estimates, fingerprints and the offline adapter's seed."""
        parts = [self.system_policy, *self.tool_grants, self.task_instruction]
        parts += [f"<{p.kind}>\n{p.content}\n</{p.kind}>" for p in self.untrusted]
        return "\n\n".join(parts)

    def tools_text(self) -> str:
        """The tool grants as every adapter states them after the system policy."""
        return "Tools granted:\n" + "\n".join(self.tool_grants)

    def user_text(self) -> str:
        """The user turn every adapter sends: the task, then each untrusted zone tagged with its kind."""
        zones = "\n\n".join(f'<untrusted kind="{p.kind}">\n{p.content}\n</untrusted>' for p in self.untrusted)
        return (self.task_instruction + (f"\n\n{zones}" if zones else "")) or "(empty)"


@dataclass(frozen=True)
class ModelReply:
    text: str
    usage: Usage
    offline: bool
    provider_attempts: int = 1
    batched: bool = False
    # Provider errors met (and retried past) on the way, by class name.
    retried_errors: tuple[str, ...] = field(default=())
    # The provider reported no usage: `usage` is the len/4 estimate, and the call's cost is an estimate.
    usage_estimated: bool = False
    # With a providers table: every provider the call was tried on, in order, the last the one that
    # answered (the others fell back on a transient error); empty with a single adapter.
    providers_tried: tuple[ProviderAttempt, ...] = ()

    @property
    def answered_by(self) -> ProviderAttempt | None:
        """The provider of the table that answered (None with a single adapter)."""
        return self.providers_tried[-1] if self.providers_tried else None

    @property
    def fallbacks(self) -> tuple[ProviderAttempt, ...]:
        """The providers that failed the call before the one that answered."""
        return self.providers_tried[:-1]


class ModelAdapter(Protocol):
    """A model behind the gateway; `name` is stamped on audit records."""

    name: str
    offline: bool

    async def count_input_tokens(self, request: ModelRequest) -> int:
        """Input tokens the request will bill, exact where the provider can count them."""
        ...

    async def generate(self, request: ModelRequest) -> ModelReply: ...

    async def close(self) -> None: ...
