"""A judge behind any OpenAI-compatible chat-completions endpoint (hosted, vLLM, Ollama,
llama.cpp server). httpx stays in the adapters (here and in their shared retries, http_retry);
its errors become JudgeFailed at this boundary.

Every answer is a JSON object, asked for twice: by `response_format` (a JSON schema, where the
server supports it; a server that rejects it is asked again without it) and in the prompt.
The answer is validated with pydantic; anything unusable raises JudgeFailed, and the policies
then change nothing. The API key goes only into the Authorization header: never into logs,
messages or reprs.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Sequence
from typing import Literal, TypeVar

import httpx
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
)

from schemas.rows import Row
from services.adapters.http_retry import RetriesExhausted, post_with_retries
from services.core.maintenance.judging import (
    MERGED_MAX_TOKENS,
    GroupLabel,
    PairDecision,
    clip_tokens,
)
from services.errors import JudgeFailed

log = logging.getLogger(__name__)

MAX_CHARS_PER_ROW = 2000  # MemRefine shows a judge the first 2,000 characters of each entry
_FENCE = re.compile(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", re.DOTALL)

SYSTEM = (
    "You maintain the memory of an organisation: a store of dated, attributed documents such as "
    "emails, tickets and meeting notes. Documents are never rewritten to settle a disagreement; "
    "your answers only decide which copies are redundant. Reply with a single JSON object of the "
    "requested shape and nothing else."
)

LABEL_PROMPT = """The documents below are close in meaning. Say how they relate.
- "conflict": they are about the same fact and its value changed from one document to a later one (a new date, amount, owner, status or decision). The newest one holds now; the older ones stay as history.
- "restatement": they state the same facts in other words; one combined document would lose nothing.
- "distinct": they only look alike: they are about different things, or at least one states a fact the others lack.
If you are not sure, answer "distinct"; it changes nothing.

{documents}

Reply with JSON: {{"label": "conflict" | "restatement" | "distinct", "reason": "<one short sentence>"}}"""

PAIR_PROMPT = """Two stored documents have embedding cosine similarity {similarity:.3f}. The store must get smaller, but no fact may disappear unless the other document still carries it.
Compare what they state (people, dates, figures, decisions, owners, commitments, places), not how they word it. Greetings, thanks, sign-offs and small talk carry no facts.
Choose one action:
- "delete": one document adds nothing the other lacks (the same facts in other words, or only filler). Put the one with fewer specific facts in "drop" ("a" or "b").
- "merge": each holds facts the other lacks, and one document could carry both. In "merge_instruction", list the facts from each that the combined document must keep.
- "preserve": they hold different important facts, or the same fact with different values at different dates (those are versions and are kept).
If the two differ in phrasing alone, the answer is "delete"; "merge" is for pairs where each side has a fact the other lacks.

{documents}

Reply with JSON: {{"action": "delete" | "merge" | "preserve", "drop": "a" | "b" | "none", "merge_instruction": "<facts to keep, or empty>", "reason": "<one short sentence>"}}"""

MERGE_PROMPT = """Write one document that replaces all of the documents below.
Keep every fact: people, dates, figures, decisions, owners, places, and who said or decided what. Leave out greetings and filler. Use at most {max_tokens} words; shorter is better as long as no fact is lost.
{instruction}
{documents}

Reply with JSON: {{"text": "<the combined document>"}}"""


class _Answer(BaseModel):
    model_config = ConfigDict(extra="ignore")


class LabelAnswer(_Answer):
    label: Literal["conflict", "restatement", "distinct"]
    reason: str = ""


class PairAnswer(_Answer):
    action: Literal["delete", "merge", "preserve"]
    drop: Literal["a", "b", "none"] = "none"
    merge_instruction: str = ""
    reason: str = ""

    @field_validator("action", "drop", mode="before")
    @classmethod
    def _lower(cls, value: object) -> object:
        # MemRefine's judge says "nothing" for preserve; accept it and any casing.
        value = value.strip().lower() if isinstance(value, str) else value
        return "preserve" if value == "nothing" else value


class MergeAnswer(_Answer):
    text: str = Field(min_length=1)


A = TypeVar("A", bound=_Answer)


def _schema(name: str, properties: dict) -> dict:
    return {
        "type": "json_schema",
        "json_schema": {
            "name": name,
            "strict": True,
            "schema": {
                "type": "object",
                "properties": properties,
                "required": list(properties),
                "additionalProperties": False,
            },
        },
    }


_STR = {"type": "string"}
LABEL_FORMAT = _schema(
    "group_label", {"label": {"type": "string", "enum": ["conflict", "restatement", "distinct"]}, "reason": _STR}
)
PAIR_FORMAT = _schema(
    "pair_decision",
    {
        "action": {"type": "string", "enum": ["delete", "merge", "preserve"]},
        "drop": {"type": "string", "enum": ["a", "b", "none"]},
        "merge_instruction": _STR,
        "reason": _STR,
    },
)
MERGE_FORMAT = _schema("merged_text", {"text": _STR})


def render_row(label: str, row: Row, max_chars: int = MAX_CHARS_PER_ROW) -> str:
    date = row.event_time.date().isoformat() if row.event_time else "undated"
    head = f"[{label}] {date} · {row.author or 'unknown author'} · {row.kind}"
    title = f"\n{row.title}" if row.title else ""
    text = row.text.strip()
    if len(text) > max_chars:
        text = text[:max_chars] + " [...]"
    return f"{head}{title}\n{text}"


class OpenAICompatJudge:
    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: SecretStr | None = None,
        timeout_s: float = 30.0,
        max_retries: int = 3,
        backoff_s: float = 0.5,
        max_calls: int | None = None,
        *,
        temperature: float | None = 0.0,
        structured_output: bool = True,
        max_chars_per_row: int = MAX_CHARS_PER_ROW,
    ):
        if max_retries < 0 or timeout_s <= 0 or backoff_s < 0:
            raise ValueError("timeout_s must be > 0, max_retries and backoff_s >= 0")
        self.name = f"openai:{model}"
        self.model = model
        self.base_url = base_url.rstrip("/")
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.max_calls = max_calls
        self.temperature = temperature
        self.structured_output = structured_output
        self.max_chars_per_row = max_chars_per_row
        self.timeout_s = timeout_s
        self.calls = 0
        self._key = api_key
        headers = {"Content-Type": "application/json"}
        if api_key is not None and api_key.get_secret_value():
            headers["Authorization"] = f"Bearer {api_key.get_secret_value()}"
        self._client = httpx.Client(timeout=httpx.Timeout(timeout_s), headers=headers)

    def __repr__(self) -> str:
        return f"OpenAICompatJudge(base_url={self.base_url!r}, model={self.model!r}, calls={self.calls})"

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> OpenAICompatJudge:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the Judge protocol --------------------------------------------------------------

    def label_group(self, rows: Sequence[Row]) -> GroupLabel:
        if len(rows) < 2:
            raise ValueError(f"rows: a group needs two or more rows, got {len(rows)}")
        prompt = LABEL_PROMPT.format(documents=self._documents(rows, [str(i) for i in range(1, len(rows) + 1)]))
        answer = self._ask("label_group", prompt, LABEL_FORMAT, LabelAnswer)
        return GroupLabel(answer.label, answer.reason)

    def merge(self, rows: Sequence[Row], max_tokens: int = MERGED_MAX_TOKENS, instruction: str = "") -> str:
        if not rows:
            raise ValueError("rows: nothing to merge")
        prompt = MERGE_PROMPT.format(
            max_tokens=max_tokens,
            instruction=f"Instruction: {instruction.strip()}\n" if instruction.strip() else "",
            documents=self._documents(rows, [str(i) for i in range(1, len(rows) + 1)]),
        )
        answer = self._ask("merge", prompt, MERGE_FORMAT, MergeAnswer)
        text = clip_tokens(answer.text, max_tokens)
        if not text:
            raise JudgeFailed("merge: the model returned an empty text")
        return text

    def judge_pair(self, a: Row, b: Row, similarity: float) -> PairDecision:
        prompt = PAIR_PROMPT.format(similarity=similarity, documents=self._documents([a, b], ["a", "b"]))
        answer = self._ask("judge_pair", prompt, PAIR_FORMAT, PairAnswer)
        if answer.action == "delete":
            if answer.drop == "none":
                raise JudgeFailed("judge_pair: delete without naming which row to drop")
            gone, keep = (a, b) if answer.drop == "a" else (b, a)
            return PairDecision("delete", keep=keep.row_id, archive=gone.row_id, reason=answer.reason)
        if answer.action == "merge":
            # A second call writes the text, guided by the facts the first call listed (MemRefine).
            text = self.merge([a, b], instruction=answer.merge_instruction)
            return PairDecision("merge", merged_text=text, reason=answer.reason)
        return PairDecision("preserve", reason=answer.reason)

    # -- the HTTP exchange ---------------------------------------------------------------

    def _documents(self, rows: Sequence[Row], labels: list[str]) -> str:
        return "\n\n".join(render_row(label, row, self.max_chars_per_row) for label, row in zip(labels, rows, strict=True))

    def _redact(self, text: str) -> str:
        secret = self._key.get_secret_value() if self._key is not None else ""
        return text.replace(secret, "***") if secret else text

    def _ask(self, call: str, prompt: str, response_format: dict, answer_type: type[A]) -> A:
        content = self._complete(call, prompt, response_format)
        match = _FENCE.match(content)  # some servers wrap JSON in a code fence despite the schema
        try:
            return answer_type.model_validate(json.loads(match.group(1) if match else content))
        except (json.JSONDecodeError, ValidationError) as exc:
            if isinstance(exc, ValidationError):
                detail = str(exc.errors(include_url=False, include_input=False))
            else:
                detail = str(exc)
            raise JudgeFailed(f"{call}: malformed answer from {self.name}: {self._redact(detail)[:300]}") from None

    def _complete(self, call: str, prompt: str, response_format: dict) -> str:
        if self.max_calls is not None and self.calls >= self.max_calls:
            raise JudgeFailed("call cap reached")
        self.calls += 1
        body: dict = {
            "model": self.model,
            "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": prompt}],
        }
        if self.temperature is not None:
            body["temperature"] = self.temperature
        if self.structured_output:
            body["response_format"] = response_format
        response = self._post(call, body)
        try:
            content = response.json()["choices"][0]["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError):
            raise JudgeFailed(f"{call}: {self.name} sent no choices[0].message.content") from None
        if not isinstance(content, str) or not content.strip():
            raise JudgeFailed(f"{call}: {self.name} sent an empty message")
        return content

    def _post(self, call: str, body: dict) -> httpx.Response:
        url = f"{self.base_url}/chat/completions"
        try:
            response = post_with_retries(self._client, url, body, max_retries=self.max_retries, backoff_s=self.backoff_s,
                                         timeout_s=self.timeout_s, label=f"judge {self.name} {call}",
                                         amend=self._without_response_format)
        except RetriesExhausted as exc:
            raise JudgeFailed(f"{call}: {exc.problem} from {self.name}, {exc.attempts} attempts") from None
        if response.status_code != 200:
            raise JudgeFailed(f"{call}: HTTP {response.status_code} from {self.name}: "
                              f"{self._redact(response.text[:300])}")
        return response

    def _without_response_format(self, response: httpx.Response, body: dict) -> dict | None:
        """The request again without `response_format`, when the server refused it for that."""
        text = self._redact(response.text[:300])
        if response.status_code == 400 and "response_format" in body and re.search(r"response_format|json_schema", text):
            # This server has no structured output: rely on the prompt alone from now on.
            log.info("judge %s: server rejected response_format; asking without it", self.name)
            self.structured_output = False
            return {k: v for k, v in body.items() if k != "response_format"}
        return None
