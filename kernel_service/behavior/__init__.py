"""The behaviour layer: HTN plans, personality trees, needs, emotion and arbitration, at kernel speed."""

from kernel_service.behavior.layer import DecisionReport, PersonalityBehaviorLayer

__all__ = ["DecisionReport", "PersonalityBehaviorLayer"]
