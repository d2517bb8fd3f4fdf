"""Quiet model loading: no progress bars, no library chatter, errors still raised.

transformers draws a "Loading weights" bar (and huggingface_hub a download bar) on every
model load, and logs warnings such as a load report of unused keys. Inside ``quiet_loading``
the bars are off and those loggers print errors only; a failure still raises, and the caller
turns it into an OcrrError. The previous settings come back afterwards, so a program that
embeds ocrr keeps its own choices.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

_LOGGERS = ("sentence_transformers", "transformers", "huggingface_hub")


@contextmanager
def quiet_loading() -> Iterator[None]:
    """Silence transformers / sentence-transformers / huggingface_hub bars and warnings while inside."""
    import huggingface_hub.utils as hub  # installed with sentence-transformers (a base dependency)
    from transformers.utils import logging as hf_logging

    bars_were_on = hf_logging.is_progress_bar_enabled()
    hub_bars_were_off = hub.are_progress_bars_disabled()
    verbosity = hf_logging.get_verbosity()
    levels = {name: logging.getLogger(name).level for name in _LOGGERS}
    hf_logging.disable_progress_bar()  # transformers' own bars and huggingface_hub's
    hf_logging.set_verbosity_error()
    for name in _LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)
    try:
        yield
    finally:
        hf_logging.set_verbosity(verbosity)
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)
        if bars_were_on:
            hf_logging.enable_progress_bar()  # (turns huggingface_hub's bars on too)
        if hub_bars_were_off:
            hub.disable_progress_bars()
