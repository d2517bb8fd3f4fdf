"""The index options are declared once (``IndexOptions``' fields); every system that owns a k-NN
store takes them from that declaration, with the same defaults and specs' refusals."""

from __future__ import annotations

import inspect
import re

import pytest

from ocrr.errors import OcrrError
from ocrr.index.options import INDEX_OPTIONS, IndexOptions
from ocrr.systems import make_system
from ocrr.systems.hybrid.consolidating import ConsolidatingMemory
from ocrr.systems.hybrid.knn_lm import KNNLM
from ocrr.systems.substrate import Substrate

OWNERS = (Substrate, KNNLM, ConsolidatingMemory)


@pytest.mark.parametrize("owner", OWNERS, ids=lambda c: c.__name__)
def test_each_owner_declares_the_index_options_as_declared_once(owner):
    declared = owner.declared_options()
    assert {key: declared[key] for key in INDEX_OPTIONS} == INDEX_OPTIONS
    system = owner()
    assert system.index_options == IndexOptions()  # every default as declared
    assert all(getattr(system, key) == option.default for key, option in INDEX_OPTIONS.items())


@pytest.mark.parametrize("owner", OWNERS, ids=lambda c: c.__name__)
def test_the_constructor_signature_shows_the_declared_options(owner):
    params = inspect.signature(owner).parameters
    assert [p for p in params if p in INDEX_OPTIONS] == list(INDEX_OPTIONS)
    assert all(params[key].default == option.default for key, option in INDEX_OPTIONS.items())


@pytest.mark.parametrize(
    "owner, given, words",
    [
        (Substrate, {"nprobe": 0}, "substrate: nprobe must be an integer ≥ 1, got 0."),
        (Substrate, {"index": "annoy"}, "substrate: index must be one of exact, hnsw"),
        (KNNLM, {"hnsw_m": "zero"}, "knn_lm: hnsw_m must be an integer ≥ 2, got 'zero'."),
        (ConsolidatingMemory, {"target_recall": 1.5}, "consolidating: target_recall must be a number in [0, 1]"),
        (Substrate, {"target_agreement": 0.99}, "substrate: target_agreement tunes an IVF index"),
    ],
)
def test_a_direct_call_is_refused_with_specs_message(owner, given, words):
    with pytest.raises(OcrrError, match=re.escape(words)):
        owner(**given)


def test_an_unknown_keyword_is_a_type_error_naming_it():
    with pytest.raises(TypeError, match="indx"):
        Substrate(indx="hnsw")
    with pytest.raises(TypeError, match="indx"):
        KNNLM(indx="hnsw")


def test_the_values_are_kept_as_given():
    # an int given for a number stays an int: the recorded hyperparameters (and task ids) do not move
    sub = make_system("substrate:index=ivf:target_recall=1")
    assert sub.target_recall == 1 and isinstance(sub.target_recall, int)
    assert sub.hyperparameters()["target_recall"] == 1
    knn = make_system("knn_lm:index=hnsw:ef_search=32")
    assert knn.index_options.ef_search == 32 and knn.hyperparameters()["ef_search"] == 32
