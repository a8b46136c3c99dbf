"""Generation-time localization: a native line via the gateway or a labelled template; never translation."""

from __future__ import annotations

from egbe.v1 import cognition_pb2, gateway_pb2

QUALITY_BLOCKED = "blocked"
FALLBACK_LOCALE = "en-US"


def native_line(
    locale: str, utterance: str, response: gateway_pb2.GenerateResponse
) -> cognition_pb2.LocalizedLine:
    """A line the gateway generated in the target locale; a blocked quality verdict withholds it.

    The offline adapter is not a model, so its line is not labelled native generation.
    """
    return cognition_pb2.LocalizedLine(
        locale=locale,
        text=utterance,
        source=cognition_pb2.LINE_SOURCE_MODEL,
        generated_natively=not response.offline,
        approved=response.quality_status != QUALITY_BLOCKED,
        quality_status=response.quality_status,
        model_ref=response.model_ref,
        call_id=response.call_id,
    )


def template_line(locale: str, counterpart: str, templates: dict[str, str]) -> cognition_pb2.LocalizedLine:
    """With no model line, the authored template of the locale, labelled as such; a locale without one
    gets the en-US template, labelled en-US (never a translation)."""
    if locale not in templates:
        locale = FALLBACK_LOCALE
    return cognition_pb2.LocalizedLine(
        locale=locale,
        text=templates[locale].format(name=counterpart or "friend"),
        source=cognition_pb2.LINE_SOURCE_TEMPLATE_FALLBACK,
        generated_natively=False,
        approved=True,
    )
