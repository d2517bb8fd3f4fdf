"""llm_icl: a small instruction-tuned LLM choosing the label, shown the k nearest corrections.

Memory: the substrate's append-only ledger (seed set and every correction, texts kept), so
nothing learned is overwritten and the store can be verified like the substrate's. To predict
an item, its ``k`` nearest stored entries (cosine, ``ocrr.index``) become the examples of a
prompt (``ocrr.systems.llm.prompt``) and the model scores each candidate label's tokens by
log-likelihood after the prompt; the highest score wins. The answer is always one of the
candidates: the retrieved examples' labels (``candidates=retrieved``), or every label known
so far (``candidates=all``). When the neighbours agree on a single label there is nothing to
choose and the model is not asked.

Calibration (``calibrate``), which the notes found brings the 135M model level with the
neighbours' majority vote: ``prior`` adds log((count + 1/2) / (k + C/2)), the share of the
k neighbours carrying the label; ``contextual`` subtracts each label's score after the same
examples with the query replaced by "N/A" (Zhao et al. 2021: the label's bias in that
context); ``both`` does both.

Backends: ``local`` (``ocrr.systems.llm.backends``: a GGUF model through transformers, the
packaged SmolLM2-135M-Instruct by default) or ``openai`` (``ocrr.systems.llm.openai_backend``: any
OpenAI-compatible endpoint named by the environment). Every score goes through the answer
cache (``ocrr.systems.llm.cache``), so a rerun costs look-ups only.

Free cores: in a sweep whose other runs have finished, llm_icl scores several prompts at
once (``use_free_cores``), each on its own thread with ``threads`` torch threads, so every score,
and so every result, is the one computed alone.

``max_eval``: the most items of each checkpoint evaluation set to score (0: all). The system
offers ``evaluation_subset(name, n)``, a seeded sample the same at every checkpoint; a runner
that honours it scores only those items (the value is in the recorded hyperparameters).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from ocrr.batch import Batch
from ocrr.errors import OcrrError
from ocrr.specs import Option
from ocrr.systems.base import Footprint, check_vectors, require_labels
from ocrr.systems.llm.backends import PACKAGED, PRECISIONS, LocalScorer, Scores, require_llm_extra
from ocrr.systems.llm.cache import AnswerCache, CallStats, Progress, answer_key, default_cache_path
from ocrr.systems.llm.openai_backend import SCORING_MODES, OpenAIScorer
from ocrr.systems.llm.prompt import CONTENT_FREE, TEMPLATES, continuation, fit_prompt
from ocrr.systems.seeds import derive_seed
from ocrr.systems.substrate.core import Substrate

BACKENDS = ("local", "openai")
CANDIDATES = ("retrieved", "all")
CALIBRATIONS = ("off", "prior", "contextual", "both")
_SHARED_CACHES: dict[str | None, AnswerCache] = {}  # one per file per process (and one in memory)


def shared_cache(path: str | None) -> AnswerCache:
    if path not in _SHARED_CACHES:
        _SHARED_CACHES[path] = AnswerCache(path)
    return _SHARED_CACHES[path]


class LLMICL(Substrate):
    """The substrate's ledger and retrieval; an LLM's constrained choice instead of the vote."""

    family = "llm"
    reads_text = True
    takes_free_cores = True  # as prompts scored at once, never as more torch threads per prompt
    execution_settings = ("threads", "cache", "progress", "concurrency", "timeout", "retries")  # type: ignore[assignment]
    # the conformance checks run the machinery on the tiny random model, in memory
    conformance_overrides = {"model": "tiny-random", "k": 3, "cache": None, "progress": 0.0}
    options = {
        "k": Option(kind=int, low=1, help="nearest stored examples shown in the prompt"),
        "candidates": Option(kind=str, choices=CANDIDATES, help="labels scored: the examples' labels, or all known"),
        "template": Option(kind=str, choices=TEMPLATES, help="prompt layout: ChatML turns, or plain few-shot text"),
        "model": Option(
            kind=str,
            help="local: smollm2 (packaged), tiny-random (tests) or a .gguf path; openai: the served model's "
            "name ($OCRR_LLM_MODEL wins)",
        ),
        "backend": Option(kind=str, choices=BACKENDS, help="local model, or an OpenAI-compatible endpoint"),
        "precision": Option(kind=str, choices=PRECISIONS, help="local: the model's arithmetic (bf16: about 2x faster)"),
        "max_prompt_tokens": Option(kind=int, low=16, help="prompt budget: the farthest examples are dropped to fit"),
        "calibrate": Option(kind=str, choices=CALIBRATIONS, help="retrieval prior and/or content-free calibration"),
        "max_eval": Option(kind=int, low=0, help="most items scored per checkpoint evaluation set; 0: all"),
        "api_scoring": Option(
            kind=str, choices=SCORING_MODES, help="openai: label log-probabilities, constrained choice, or auto"
        ),
        "threads": Option(
            kind=int,
            low=0,
            help="local: torch threads while scoring (a fixed count keeps results fixed); 0: the caller's (how)",
        ),
        "cache": Option(
            kind=str,
            allow_none=True,
            help="answer cache file; user: <ocrr cache>/llm/answers.sqlite; none: memory only (how)",
        ),
        "progress": Option(kind=float, low=0, help="seconds between progress lines on stderr; 0: none (how)"),
        "concurrency": Option(kind=int, low=1, help="openai: requests in flight (how)"),
        "timeout": Option(kind=float, gt=0, help="openai: seconds per request (how)"),
        "retries": Option(kind=int, low=0, help="openai: retries with back-off per request (how)"),
    }

    def __init__(
        self,
        k: int = 4,  # prompt length drives the cost: 4 examples keep a prompt near 150 tokens
        candidates: str = "retrieved",
        template: str = "chat",
        model: str = PACKAGED,
        backend: str = "local",
        precision: str = "fp32",
        max_prompt_tokens: int = 512,
        calibrate: str = "both",
        max_eval: int = 0,
        api_scoring: str = "auto",
        threads: int = 1,
        cache: str | None = "user",
        progress: float = 30.0,
        concurrency: int = 4,
        timeout: float = 60.0,
        retries: int = 3,
        labels=None,
        seed: int = 0,
        name: str = "llm_icl",
    ):
        super().__init__(k=k, margin=None, store_text=True, labels=labels, seed=seed, name=name)
        self.candidates, self.template, self.model, self.backend = candidates, template, model, backend
        self.precision = precision
        self.max_prompt_tokens, self.calibrate, self.max_eval = max_prompt_tokens, calibrate, max_eval
        self.api_scoring = api_scoring
        self.threads, self.cache, self.progress = threads, cache, progress
        self.concurrency, self.timeout, self.retries = concurrency, timeout, retries
        if backend == "local":
            require_llm_extra()  # at the door: one line naming the extra
        self.stats = CallStats()
        self._scorer: LocalScorer | OpenAIScorer | None = None
        self._core_share: Callable[[], int] | None = None

    def hyperparameters(self) -> dict:
        return {
            "k": self.k,
            "candidates": self.candidates,
            "template": self.template,
            "model": self.model,
            "backend": self.backend,
            "precision": self.precision,
            "max_prompt_tokens": self.max_prompt_tokens,
            "calibrate": self.calibrate,
            "max_eval": self.max_eval,
            "api_scoring": self.api_scoring,
        }

    # -- the model behind it, built on first use (not pickled: reloaded from the process cache) --
    @property
    def scorer(self) -> LocalScorer | OpenAIScorer:
        if self._scorer is None:
            if self.backend == "local":
                self._scorer = LocalScorer(self.model, self.threads, self.precision, self._prompts_at_once)
            else:
                self._scorer = OpenAIScorer.from_environment(
                    self.model, self.api_scoring, self.concurrency, self.timeout, self.retries
                )
        return self._scorer

    def use_free_cores(self, share: Callable[[], int]) -> None:
        """``share()``: the threads this run may use now (a sweep's ``CoreBudget``). The local
        backend scores that many prompts at once, each on ``threads`` torch threads; the
        OpenAI-compatible backend already keeps ``concurrency`` requests in flight."""
        self._core_share = share

    def _prompts_at_once(self) -> int:
        return 1 if self._core_share is None else max(1, self._core_share() // max(1, self.threads))

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_scorer"] = None
        state["_core_share"] = None  # the pool's, not another process's
        state.pop("_progress", None)
        return state

    # -- learning: the substrate's ledger, texts required ------------------------------------
    def fit(self, seed: Batch) -> LLMICL:
        self._require_texts(seed, "fit")
        return super().fit(seed)  # type: ignore[return-value]

    def correct(self, batch: Batch) -> None:
        self._require_fitted()
        require_labels(batch, self.name)
        self._require_texts(batch, "correct")
        super().correct(batch)

    def _require_texts(self, batch: Batch, what: str) -> None:
        if batch.texts is None or len(batch.texts) != len(batch):
            raise OcrrError(
                f"{self.name}.{what} needs the items' texts (it reads them); the batch has none. "
                "Run it on a dataset with texts, not on precomputed embeddings alone."
            )

    # -- inference ------------------------------------------------------------------------------
    def anticipate(self, batch: Batch) -> None:
        """Nothing: each answer costs model calls, next to which the retrieval is free."""

    def predict(self, batch: Batch) -> list[str | None]:
        ledger, _ = self._fitted()
        queries = check_vectors(batch.vecs, ledger.dim, "query vectors")
        self._require_texts(batch, "predict")
        assert batch.texts is not None
        if len(batch) == 0:
            return []
        _, ids = self.search_.search(queries, self.k)
        questions = [self._question(batch.texts[i], ids[i]) for i in range(len(batch))]
        answers = self._answer([r for q in questions for r in q.requests])
        return [q.decide(answers, self.calibrate) for q in questions]

    def _question(self, text: str, neighbour_ids: np.ndarray) -> _Question:
        ledger = self._fitted_ledger()
        near = [int(i) for i in neighbour_ids if i >= 0]  # nearest first
        labels = [ledger.label_of(i) for i in near]
        retrieved = list(dict.fromkeys(labels))
        options = retrieved
        if self.candidates == "all":
            options = retrieved + [n for n in sorted(self.space_.names) if n not in retrieved]
        counts = [labels.count(label) for label in options]
        question = _Question(options, counts)
        if len(options) <= 1:
            self.stats.single += 1
            return question
        examples = [(ledger[i].text or "", ledger.label_of(i)) for i in reversed(near)]  # nearest last
        conts = [continuation(self.template, label) for label in options]
        scorer = self.scorer
        prompt, kept = fit_prompt(self.template, examples, text, self.max_prompt_tokens, scorer.count_tokens)
        question.ask(scorer, prompt, conts)
        if self.calibrate in ("contextual", "both"):
            shown = examples[len(examples) - kept :]
            blank, _ = fit_prompt(self.template, shown, CONTENT_FREE, self.max_prompt_tokens, scorer.count_tokens)
            question.ask(scorer, blank, conts)
        return question

    def _answer(self, requests: list[tuple[str, str, list[str]]]) -> dict[str, tuple[float, ...]]:
        """Scores by answer key: from the cache, else from the model (misses batched to it)."""
        if not requests:
            return {}
        scorer = self.scorer
        answers: dict[str, tuple[float, ...]] = {}
        missing: dict[str, tuple[str, list[str]]] = {}
        cache = shared_cache(str(default_cache_path()) if self.cache == "user" else self.cache)
        for key, prompt, conts in requests:
            if key in answers or key in missing:
                continue
            found = cache.get(key)
            if found is None:
                missing[key] = (prompt, conts)
            else:
                answers[key] = found[0]
                self.stats.hits += 1
        if missing:
            keys = list(missing)
            for key, scores in zip(keys, scorer.score_many([missing[k] for k in keys], self._record)):
                cache.put(key, scores.logprobs, scores.tokens)
                answers[key] = scores.logprobs
        return answers

    def _record(self, scores: Scores, seconds: float) -> None:
        """Called after every model call: the stats and, now and then, a progress line."""
        self.stats.calls += 1
        self.stats.tokens += scores.tokens
        self.stats.seconds += seconds
        progress = self.__dict__.get("_progress")
        if progress is None:
            progress = self.__dict__["_progress"] = Progress(self.progress)
        progress.tick(self.stats)

    def uncertainty(self, batch: Batch) -> np.ndarray | None:  # type: ignore[override]
        """Not offered (the substrate's vote margin would describe the neighbours, not the model)."""
        return None

    def evaluation_subset(self, name: str, n: int) -> np.ndarray | None:
        """The items of an n-item evaluation set to score under ``max_eval`` (None: all): a
        sample drawn from the run seed and the set's name, the same at every checkpoint."""
        if not self.max_eval or n <= self.max_eval:
            return None
        rng = np.random.default_rng(derive_seed(self.seed, f"llm_icl/eval/{name}"))
        return np.sort(rng.choice(n, size=self.max_eval, replace=False))

    def footprint(self) -> Footprint:
        base = super().footprint()
        return Footprint(base.entries, base.params, base.bytes, {**base.extra, "model": self.model})


class _Question:
    """One query's candidate labels, their neighbour counts, and the requests scoring them."""

    def __init__(self, options: Sequence[str], counts: Sequence[int]):
        self.options = list(options)
        self.counts = list(counts)
        self.requests: list[tuple[str, str, list[str]]] = []  # (answer key, prompt, continuations)

    def ask(self, scorer: LocalScorer | OpenAIScorer, prompt: str, conts: list[str]) -> None:
        self.requests.append((answer_key(scorer.identity, scorer.method, prompt, conts), prompt, conts))

    def decide(self, answers: dict, calibrate: str) -> str | None:
        if not self.options:
            return None
        if len(self.options) == 1:
            return self.options[0]
        scores = np.asarray(answers[self.requests[0][0]], np.float64)
        if calibrate in ("contextual", "both"):
            scores = scores - np.asarray(answers[self.requests[1][0]], np.float64)
        if calibrate in ("prior", "both"):
            total = sum(self.counts) + len(self.counts) / 2
            scores = scores + np.log([(c + 0.5) / total for c in self.counts])
        return self.options[int(np.argmax(scores))]  # ties: the label of the nearer neighbour
