"""Isis policy gate and Sophia grounding: fail-closed evaluators."""
