"""llm_icl's prompts: the retrieved examples and the query, in a template, within a token budget.

Templates (``template=`` of llm_icl):

* ``chat``: the ChatML turns SmolLM2 and Qwen-style instruction models were tuned on: a
  system line, one user turn listing the examples as ``Message:``/``Label:`` pairs (nearest
  last, next to the query) and the query, then the opened assistant turn. A candidate is
  scored as the assistant's answer, the label text with nothing after it (the notes measured
  that adding the end-of-turn token scores worse).
* ``plain``: the same pairs as a few-shot text ending in ``Label:``; a candidate is scored as
  `` label`` (with its leading space, as a tokenizer splits it inside running text).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

TEMPLATES = ("chat", "plain")
INSTRUCTION = "Classify the message. Reply with its label only, written exactly as in the examples."
CONTENT_FREE = "N/A"  # the query of contextual calibration (Zhao et al. 2021)


def render(template: str, examples: Sequence[tuple[str, str]], query: str) -> str:
    """The prompt for ``query`` after ``examples`` ((text, label) pairs, in the order shown)."""
    pairs = "".join(f"Message: {_one_line(text)}\nLabel: {label}\n\n" for text, label in examples)
    if template == "chat":
        return (
            f"<|im_start|>system\n{INSTRUCTION}<|im_end|>\n"
            f"<|im_start|>user\n{pairs}Message: {_one_line(query)}<|im_end|>\n"
            "<|im_start|>assistant\n"
        )
    return f"{INSTRUCTION}\n\n{pairs}Message: {_one_line(query)}\nLabel:"


def continuation(template: str, label: str) -> str:
    """What is scored for a candidate label after a prompt of this template."""
    return label if template == "chat" else f" {label}"


def fit_prompt(
    template: str,
    examples: Sequence[tuple[str, str]],
    query: str,
    max_tokens: int,
    count_tokens: Callable[[str], int],
) -> tuple[str, int]:
    """The prompt with as many examples as fit in ``max_tokens`` (the farthest dropped first:
    ``examples`` come nearest last), and how many were kept. With none kept and still too
    long, the query is cut to fit (by characters, halving the excess until it fits)."""
    kept = len(examples)
    prompt = render(template, examples, query)
    while kept > 0 and count_tokens(prompt) > max_tokens:
        kept -= 1
        prompt = render(template, examples[len(examples) - kept :], query)
    if kept == 0:
        keep_chars = len(query)
        while keep_chars > 0 and count_tokens(prompt) > max_tokens:
            keep_chars //= 2
            prompt = render(template, (), query[:keep_chars])
    return prompt, kept


def _one_line(text: str) -> str:
    return " ".join(str(text).split())
