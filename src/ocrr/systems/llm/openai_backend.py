"""llm_icl's remote backend: any OpenAI-compatible endpoint (llama.cpp or vLLM server, Ollama, a hosted API).

The endpoint comes from the environment, never from a spec (a URL does not fit the option
grammar, and a key must not land in results): ``OCRR_LLM_BASE_URL`` (else ``OPENAI_BASE_URL``),
e.g. ``http://127.0.0.1:8080/v1``; ``OCRR_LLM_API_KEY`` (else ``OPENAI_API_KEY``), optional;
``OCRR_LLM_MODEL``, the served model's name (else llm_icl's ``model`` option).

Scoring (``api_scoring``):

* ``logprobs``: ``/completions`` with ``echo`` and ``logprobs``, one request per query with
  the prompt + each candidate as its prompts; a candidate's score is the sum of the
  log-probabilities of the tokens whose character offset falls inside it. The same number
  as the local backend computes, from the server's model.
* ``choice``: ``/chat/completions`` with a JSON schema allowing only the candidates
  (``response_format``), temperature 0: the chosen label scores 0, the others -1e9. An answer
  outside the candidates (a server ignoring the schema) scores all equal, so the label of the
  nearest example wins. Use calibrate=off or prior with it.
* ``auto``: ``logprobs`` if one probe request shows the server offers them, else ``choice``.

Requests run ``concurrency`` at a time; a connection failure, a timeout, 429 or 5xx is retried
``retries`` times with exponential back-off (0.5 s, 1 s, 2 s ...); then one OcrrError names
the endpoint and the fix. Prompt tokens are estimated as UTF-8 bytes / 4 (the endpoint's
tokenizer is not at hand): ``max_prompt_tokens`` is approximate with this backend.
"""

from __future__ import annotations

import json
import os
import re
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

from ocrr.errors import OcrrError
from ocrr.systems.llm.backends import Scores

SCORING_MODES = ("auto", "logprobs", "choice")
REJECTED = -1e9  # a candidate the constrained choice did not pick
_RETRY_STATUS = {408, 429, 500, 502, 503, 504}
_TURN = re.compile(r"<\|im_start\|>(\w+)\n(.*?)(?:<\|im_end\|>\n?|$)", re.S)


def _environment(*names: str) -> str | None:
    return next((os.environ[n] for n in names if os.environ.get(n)), None)


class OpenAIScorer:
    """Scores continuations through an OpenAI-compatible HTTP API (see the module docstring)."""

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        scoring: str = "auto",
        concurrency: int = 4,
        timeout: float = 60.0,
        retries: int = 3,
        backoff: float = 0.5,
    ):
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.api_key = api_key
        self.scoring = scoring
        self.concurrency, self.timeout, self.retries, self.backoff = concurrency, timeout, retries, backoff
        self._mode: str | None = None if scoring == "auto" else scoring

    @classmethod
    def from_environment(
        cls, model: str, scoring: str = "auto", concurrency: int = 4, timeout: float = 60.0, retries: int = 3
    ) -> OpenAIScorer:
        base_url = _environment("OCRR_LLM_BASE_URL", "OPENAI_BASE_URL")
        if not base_url:
            raise OcrrError(
                "llm_icl:backend=openai needs the endpoint in the environment: set OCRR_LLM_BASE_URL "
                "(e.g. http://127.0.0.1:8080/v1), and OCRR_LLM_API_KEY and OCRR_LLM_MODEL if it needs them."
            )
        name = _environment("OCRR_LLM_MODEL") or model
        key = _environment("OCRR_LLM_API_KEY", "OPENAI_API_KEY")
        return cls(base_url, name, key, scoring, concurrency, timeout, retries)

    # -- what the answer cache keys on ------------------------------------------------------
    @property
    def identity(self) -> str:
        return f"openai:{self.base_url}:{self.model}"

    @property
    def method(self) -> str:
        return "sum-logprob" if self.mode == "logprobs" else "choice"

    @property
    def mode(self) -> str:
        """``logprobs`` or ``choice``; under ``auto``, found out by one probe request."""
        if self._mode is None:
            self._mode = "logprobs" if self._offers_logprobs() else "choice"
        return self._mode

    def count_tokens(self, text: str) -> int:
        return len(text.encode()) // 4 + 1

    # -- scoring ------------------------------------------------------------------------------
    def score_many(
        self, requests: Sequence[tuple[str, Sequence[str]]], record: Callable[[Scores, float], None]
    ) -> list[Scores]:
        """The requests ``concurrency`` at a time, in order; ``record`` after each (in order)."""
        mode = self.mode

        def timed(request: tuple[str, Sequence[str]]) -> tuple[Scores, float]:
            start = time.perf_counter()
            prompt, conts = request
            scores = self._logprobs(prompt, conts) if mode == "logprobs" else self._choice(prompt, conts)
            return scores, time.perf_counter() - start

        out = []
        with ThreadPoolExecutor(max_workers=self.concurrency) as pool:
            for scores, seconds in pool.map(timed, requests):
                record(scores, seconds)
                out.append(scores)
        return out

    def score(self, prompt: str, continuations: Sequence[str]) -> Scores:
        return self.score_many([(prompt, continuations)], lambda scores, seconds: None)[0]

    def _logprobs(self, prompt: str, conts: Sequence[str]) -> Scores:
        body = {
            "model": self.model,
            "prompt": [prompt + c for c in conts],
            "max_tokens": 1,
            "temperature": 0,
            "echo": True,
            "logprobs": 0,
        }
        reply = self._post("/completions", body)
        choices = sorted(reply.get("choices", []), key=lambda c: c.get("index", 0))
        if len(choices) != len(conts):
            raise OcrrError(
                f"the endpoint {self.base_url} answered {len(choices)} completions for {len(conts)} prompts; "
                "it does not take a list of prompts: use llm_icl:api_scoring=choice with it."
            )
        totals = []
        for choice, cont in zip(choices, conts):
            lp = choice.get("logprobs") or {}
            offsets, values = lp.get("text_offset"), lp.get("token_logprobs")
            if not offsets or not values:
                raise OcrrError(
                    f"the endpoint {self.base_url} returned no prompt log-probabilities (echo + logprobs); "
                    "use llm_icl:api_scoring=choice with it."
                )
            lo, hi = len(prompt), len(prompt) + len(cont)
            inside = [v for o, v in zip(offsets, values) if lo <= o < hi]
            if not inside or any(v is None for v in inside):
                raise OcrrError(
                    f"the endpoint {self.base_url} gave no log-probability for the label {cont!r}; "
                    "use llm_icl:api_scoring=choice with it."
                )
            totals.append(float(sum(inside)))
        usage = reply.get("usage") or {}
        return Scores(tuple(totals), int(usage.get("prompt_tokens") or 0))

    def _choice(self, prompt: str, conts: Sequence[str]) -> Scores:
        labels = [c.strip() for c in conts]
        schema = {
            "type": "object",
            "properties": {"label": {"type": "string", "enum": labels}},
            "required": ["label"],
            "additionalProperties": False,
        }
        body = {
            "model": self.model,
            "messages": as_messages(prompt),
            "temperature": 0,
            "max_tokens": 64,
            "response_format": {"type": "json_schema", "json_schema": {"name": "label", "schema": schema}},
        }
        reply = self._post("/chat/completions", body)
        try:
            content = reply["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError):
            raise OcrrError(f"the endpoint {self.base_url} sent a chat completion without a message") from None
        picked = _picked_label(content, labels)
        scores = tuple(0.0 if picked is None or label == picked else REJECTED for label in labels)
        usage = reply.get("usage") or {}
        return Scores(scores, int(usage.get("prompt_tokens") or 0))

    def _offers_logprobs(self) -> bool:
        try:
            self._logprobs("Label:", [" yes", " no"])
        except EndpointRefused:
            return False
        except OcrrError as err:
            if "log-probabilit" in str(err) or "list of prompts" in str(err):
                return False
            raise
        return True

    # -- HTTP -----------------------------------------------------------------------------------
    def _post(self, path: str, body: dict) -> dict:
        data = json.dumps(body).encode()
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        url = self.base_url + path
        last = ""
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(self.backoff * 2 ** (attempt - 1))
            request = urllib.request.Request(url, data=data, headers=headers, method="POST")
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as response:
                    return json.loads(response.read().decode())
            except urllib.error.HTTPError as err:
                detail = err.read().decode(errors="replace")[:300]
                if err.code in _RETRY_STATUS:
                    last = f"HTTP {err.code}: {detail}"
                    continue
                if err.code in (401, 403):
                    raise OcrrError(
                        f"the endpoint {url} refused the API key (HTTP {err.code}); "
                        "set OCRR_LLM_API_KEY to a valid key."
                    ) from None
                raise EndpointRefused(f"the endpoint {url} refused the request (HTTP {err.code}): {detail}") from None
            except (urllib.error.URLError, TimeoutError, ConnectionError, json.JSONDecodeError) as err:
                last = str(getattr(err, "reason", err))
        raise OcrrError(
            f"cannot reach the OpenAI-compatible endpoint {url} after {self.retries + 1} attempts ({last}); "
            "start the server, or set OCRR_LLM_BASE_URL to one that runs."
        )


class EndpointRefused(OcrrError):
    """The server answered 4xx: the request is not one it takes (retrying will not help)."""


def as_messages(prompt: str) -> list[dict]:
    """Chat messages from a ChatML-rendered prompt (the opened assistant turn dropped); a
    plain prompt is one user message."""
    turns = [(role, text) for role, text in _TURN.findall(prompt) if text.strip()]
    if not turns:
        return [{"role": "user", "content": prompt}]
    return [{"role": role, "content": text} for role, text in turns]


def _picked_label(content: str | None, labels: Sequence[str]) -> str | None:
    if not content:
        return None
    try:
        value = json.loads(content)
        picked = value.get("label") if isinstance(value, dict) else value
    except json.JSONDecodeError:
        picked = content.strip()
    return picked if picked in labels else None
