"""The adapter interface: one model call in, one reply with its usage out."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from gateway.cost import Usage


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


@dataclass(frozen=True)
class ModelReply:
    text: str
    usage: Usage
    offline: bool
    provider_attempts: int = 1
    batched: bool = False
    # Provider errors met (and retried past) on the way, by class name.
    retried_errors: tuple[str, ...] = field(default=())


class ModelAdapter(Protocol):
    """A model behind the gateway; `name` is stamped on audit records."""

    name: str
    offline: bool

    async def count_input_tokens(self, request: ModelRequest) -> int:
        """Input tokens the request will bill, exact where the provider can count them."""
        ...

    async def generate(self, request: ModelRequest) -> ModelReply: ...

    async def close(self) -> None: ...
