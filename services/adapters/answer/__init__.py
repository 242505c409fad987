"""The answers' chat model: any OpenAI-compatible chat-completions endpoint."""

from services.adapters.answer.openai_compat import OpenAICompatChat

__all__ = ["OpenAICompatChat"]
