"""static_knn: the substrate's retrieval and vote over the seed set, never updated."""

from __future__ import annotations

from ocrr.batch import Batch
from ocrr.systems.base import require_labels
from ocrr.systems.substrate.core import Substrate


class StaticKNN(Substrate):
    """Same index and vote as the substrate; ``correct`` is accepted and ignored."""

    family = "strawman"
    learns = False  # corrections never change predictions (see System)
    default_name = "static_knn"

    def correct(self, batch: Batch) -> None:
        self._require_fitted()
        require_labels(batch, self.name)  # still reject malformed input
