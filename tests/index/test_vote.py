"""The substrate's vote rule on hand-built neighbours (paper 4.3 and the 5.6 ablations)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ocrr.index.vote import VoteRule, vote, vote_one, vote_rows

A, B = 0, 1  # label ranks: A sorts before B

FULL = VoteRule()
NO_BAND = VoteRule(margin=None)
NO_RECENCY = VoteRule(tiebreak_recency=False)
COUNT_ONLY = VoteRule(tiebreak_maxsim=False, tiebreak_recency=False)
SUMSIM = VoteRule(margin=None, weighting="sumsim")


def one(sims, ids, labels, rule=FULL):
    return int(vote(np.array([sims], np.float32), np.array([ids]), np.array([labels]), rule)[0])


def test_one_strong_match_beats_four_mediocre_only_because_of_the_band():
    sims, ids, labels = [0.90, 0.70, 0.69, 0.68, 0.67], [0, 1, 2, 3, 4], [A, B, B, B, B]
    assert one(sims, ids, labels, FULL) == A
    assert one(sims, ids, labels, NO_BAND) == B  # without the band, four mediocre votes win
    assert one(sims, ids, labels, SUMSIM) == B  # 2.74 summed similarity beats 0.90


def test_band_is_inclusive_of_the_margin_edge():
    # 0.85 is exactly 0.05 below the top (as float32 sees it) and must still vote
    sims = np.float32([0.90, 0.85, 0.85, 0.10, 0.10])
    assert sims[0] - sims[1] <= np.float32(0.05) + 1e-7
    assert one(sims, [0, 1, 2, 3, 4], [A, B, B, A, A]) == B


def test_count_decides_before_max_similarity():
    assert one([0.90, 0.89, 0.88, 0.1, 0.1], [0, 1, 2, 3, 4], [A, B, B, A, A]) == B


def test_max_similarity_breaks_a_count_tie():
    sims, ids, labels = [0.90, 0.89, 0.88, 0.86, 0.1], [9, 1, 2, 3, 4], [A, B, B, A, B]
    assert one(sims, ids, labels, FULL) == A  # 2-2 in the band; A holds the top hit
    sims_b, labels_b = [0.90, 0.89, 0.88, 0.86, 0.1], [B, A, A, B, A]
    assert one(sims_b, ids, labels_b, FULL) == B


def test_recency_breaks_a_max_similarity_tie():
    # 1-1 count, identical best similarity: the more recent entry (larger id) wins
    assert one([0.9, 0.9, 0.1, 0.1, 0.1], [3, 7, 0, 1, 2], [A, B, A, A, A]) == B
    assert one([0.9, 0.9, 0.1, 0.1, 0.1], [7, 3, 0, 1, 2], [A, B, A, A, A]) == A
    # without recency the last resort is the label that sorts first
    assert one([0.9, 0.9, 0.1, 0.1, 0.1], [3, 7, 0, 1, 2], [A, B, A, A, A], NO_RECENCY) == A


def test_count_only_ignores_similarity_in_ties():
    sims, ids, labels = [0.90, 0.89, 0.88, 0.86, 0.1], [9, 1, 2, 3, 4], [B, A, A, B, A]
    assert one(sims, ids, labels, FULL) == B
    assert one(sims, ids, labels, COUNT_ONLY) == A  # 2-2 tie falls to the first label


def test_k1_is_the_nearest_neighbour():
    assert one([0.9], [4], [B], VoteRule(k=1)) == B


def test_padding_and_empty_rows():
    # fewer entries than k: padded neighbours (label -1) never vote
    assert one([0.5, 0.0, 0.0, 0.0, 0.0], [0, -1, -1, -1, -1], [B, -1, -1, -1, -1]) == B
    assert vote(np.zeros((2, 0), np.float32), np.zeros((2, 0), int), np.zeros((2, 0), int), FULL).tolist() == [-1, -1]


def test_rows_are_independent():
    sims = np.array([[0.90, 0.70, 0.69, 0.68, 0.67], [0.9, 0.9, 0.1, 0.1, 0.1]], np.float32)
    ids = np.array([[0, 1, 2, 3, 4], [3, 7, 0, 1, 2]])
    labels = np.array([[A, B, B, B, B], [A, B, A, A, A]])
    assert vote(sims, ids, labels, FULL).tolist() == [A, B]


@settings(max_examples=2000, deadline=None)
@given(
    data=st.data(),
    k=st.integers(1, 9),
    rows=st.integers(1, 4),
    margin=st.sampled_from([None, 0.0, 0.05, 0.3]),
    maxsim=st.booleans(),
    recency=st.booleans(),
)
def test_the_row_by_row_vote_picks_what_the_array_vote_picks(data, k, rows, margin, maxsim, recency):
    """vote_rows and vote_one (the served predict's fast paths) against vote, on rows full of ties: few
    labels, similarities from a handful of float32 values (so band edges and max-similarity
    ties are common), repeated ids, and padding (-1) anywhere."""
    grid = np.float32([0.9, 0.85, 0.8, 0.5, 0.05, -0.2])
    sims = np.array(
        data.draw(
            st.lists(st.lists(st.sampled_from(grid.tolist()), min_size=k, max_size=k), min_size=rows, max_size=rows)
        ),
        np.float32,
    )
    sims = -np.sort(-sims, axis=1)  # rows sorted by similarity, as a search returns them
    ids = np.array(
        data.draw(st.lists(st.lists(st.integers(0, 6), min_size=k, max_size=k), min_size=rows, max_size=rows)), np.int64
    )
    labels = np.array(
        data.draw(st.lists(st.lists(st.integers(-1, 3), min_size=k, max_size=k), min_size=rows, max_size=rows)),
        np.int64,
    )
    ids = np.where(labels >= 0, ids, -1)
    rule = VoteRule(k=k, margin=margin, tiebreak_maxsim=maxsim, tiebreak_recency=recency)
    assert vote_rows(sims, ids, labels, rule).tolist() == vote(sims, ids, labels, rule).tolist()
    assert [vote_one(sims[r], ids[r], labels[r], rule) for r in range(rows)] == vote(sims, ids, labels, rule).tolist()
    summed = VoteRule(k=k, margin=margin, weighting="sumsim")
    assert vote_rows(sims, ids, labels, summed).tolist() == vote(sims, ids, labels, summed).tolist()


def test_vote_one_refuses_the_sumsim_weighting_and_answers_minus_one_without_neighbours():
    empty = np.empty(0)
    assert vote_one(empty.astype(np.float32), empty.astype(np.int64), empty.astype(np.int64), VoteRule()) == -1
    with pytest.raises(ValueError, match="sumsim"):
        vote_one(np.float32([0.9]), np.int64([0]), np.int64([0]), VoteRule(weighting="sumsim"))
