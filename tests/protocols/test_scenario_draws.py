"""The draws the held-out, drift and language-shift protocols share (``cap_and_shuffle``) stay
the ones their results were made with: one ``default_rng(seed)`` caps each eval set in turn,
then permutes the stream."""

from __future__ import annotations

import numpy as np

from ocrr.protocols.scenario import cap_and_shuffle


def test_cap_and_shuffle_draws_in_the_order_the_results_were_made_with():
    original, novel, stream = np.arange(50), np.arange(100, 130), np.arange(200, 260)
    rng = np.random.default_rng(7)
    want_original = original[rng.choice(50, size=20, replace=False)]
    want_novel = novel[rng.choice(30, size=20, replace=False)]
    want_stream = stream[rng.permutation(60)]

    capped, shuffled = cap_and_shuffle(7, 20, {"original": original, "novel": novel}, stream)

    assert list(capped) == ["original", "novel"]
    assert np.array_equal(capped["original"], want_original)
    assert np.array_equal(capped["novel"], want_novel)
    assert np.array_equal(shuffled, want_stream)


def test_a_set_within_the_cap_or_no_cap_keeps_every_item_in_file_order():
    small, stream = np.arange(5), np.arange(10)
    for cap in (None, 0, 5):
        capped, _ = cap_and_shuffle(1, cap, {"small": small}, stream)
        assert np.array_equal(capped["small"], small)
