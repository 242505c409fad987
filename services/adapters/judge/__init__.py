"""Judges for maintenance: the offline rule judge and any OpenAI-compatible chat endpoint."""

from services.adapters.judge.openai_compat import OpenAICompatJudge
from services.adapters.judge.rules import RuleJudge

__all__ = ["OpenAICompatJudge", "RuleJudge"]
