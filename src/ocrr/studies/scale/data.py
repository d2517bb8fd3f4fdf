"""The scale study's synthetic data: class-incremental streams, regenerable block by block.

Two families, both ``n_classes`` classes arriving class by class (ids 0.. in class order):

* ``gaussian`` (``SyntheticStream``): random unit centroids in ``dim`` dimensions; an
  entry is ``centroid + N(0, sigma^2 I_dim)``, normalised. With 384 dimensions the noise
  is isotropic and of norm sigma * sqrt(384): every entry of a class is about equally far
  from every other, so "the 5 nearest neighbours" are barely better than 5 random
  members of the class -- a hard case for any approximate index, unlike real text.
* ``subspace`` (``SubspaceStream``): the classes live in one random ``intrinsic_dim``
  dimensional subspace (centroids and noise drawn there, then mapped into ``dim``
  dimensions by a random orthonormal basis) plus a little isotropic ``ambient`` noise:
  sentence embeddings concentrate near a low-dimensional set in the same way, which
  gives near neighbours that are clearly nearer than the rest of their class.

Any block of ``BLOCK`` rows is regenerated from its own seed (``[seed, 1, class, block]``),
so 10M x 384 float32 = 15.4 GB never has to be in memory at once.
"""

from __future__ import annotations

import math

import numpy as np

BLOCK = 4096  # rows per RNG block: any row is regenerated from its block alone
CHUNK_ROWS = 65_536  # rows per processing chunk (one add call per backend)
FAMILIES = ("gaussian", "subspace")


class SyntheticStream:
    """Class-incremental Gaussian clusters, regenerable block by block."""

    def __init__(self, n: int, n_classes: int, dim: int, sigma: float, seed: int):
        if n < n_classes:
            raise ValueError(f"scale {n} is smaller than the number of classes {n_classes}")
        self.n, self.n_classes, self.dim, self.sigma, self.seed = n, n_classes, dim, sigma, seed
        cent = np.random.default_rng([seed, 0]).standard_normal((n_classes, dim))
        self.centroids = (cent / np.linalg.norm(cent, axis=1, keepdims=True)).astype(np.float32)
        counts = np.full(n_classes, n // n_classes)
        counts[: n % n_classes] += 1
        self.offsets = np.concatenate([[0], np.cumsum(counts)])  # class c holds ids offsets[c]..offsets[c+1]-1

    def labels_of(self, ids: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.offsets, ids, side="right") - 1

    def _block(self, c: int, b: int) -> np.ndarray:
        lo = self.offsets[c] + b * BLOCK
        rows = int(min(self.offsets[c + 1], lo + BLOCK) - lo)
        return self._draw(np.random.default_rng([self.seed, 1, c, b]), np.full(rows, c))

    def _draw(self, rng: np.random.Generator, labels: np.ndarray) -> np.ndarray:
        """Unit vectors of the given classes: centroid + N(0, sigma^2 I), normalised."""
        x = rng.standard_normal((len(labels), self.dim), dtype=np.float32)
        x *= np.float32(self.sigma)
        x += self.centroids[labels]
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        return x

    def chunks(self, rows: int = CHUNK_ROWS):
        """Yield (first_id, vectors) in id order, ``rows`` at a time (the last may be
        shorter); chunks span class boundaries, so a small class does not mean small adds."""
        parts, have, first = [], 0, 0
        for c in range(self.n_classes):
            n_blocks = math.ceil((self.offsets[c + 1] - self.offsets[c]) / BLOCK)
            for b in range(n_blocks):
                block = self._block(c, b)
                while len(block):
                    take = min(rows - have, len(block))
                    parts.append(block[:take])
                    block = block[take:]
                    have += take
                    if have == rows:
                        yield first, np.concatenate(parts)
                        first += have
                        parts, have = [], 0
        if have:
            yield first, np.concatenate(parts)

    def rows(self, ids: np.ndarray) -> np.ndarray:
        """Vectors of arbitrary ids (regenerates only their blocks)."""
        ids = np.asarray(ids, np.int64)
        out = np.empty((len(ids), self.dim), np.float32)
        cls = self.labels_of(ids)
        blk = (ids - self.offsets[cls]) // BLOCK
        for c, b in sorted(set(zip(cls.tolist(), blk.tolist()))):
            sel = np.flatnonzero((cls == c) & (blk == b))
            out[sel] = self._block(c, b)[ids[sel] - self.offsets[c] - b * BLOCK]
        return out

    def fresh_queries(self, n_queries: int) -> tuple[np.ndarray, np.ndarray]:
        labels = np.arange(n_queries) % self.n_classes
        labels.sort()
        return self._query_draw(np.random.default_rng([self.seed, 2]), labels), labels

    def _query_draw(self, rng: np.random.Generator, labels: np.ndarray) -> np.ndarray:
        q = self.centroids[labels] + self.sigma * rng.standard_normal((len(labels), self.dim)).astype(np.float32)
        return (q / np.linalg.norm(q, axis=1, keepdims=True)).astype(np.float32)

    def stored_queries(self, n_queries: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        ids = np.sort(np.random.default_rng([self.seed, 3]).choice(self.n, size=min(n_queries, self.n), replace=False))
        return self.rows(ids), self.labels_of(ids), ids


class SubspaceStream(SyntheticStream):
    """Classes in a random ``intrinsic_dim``-dimensional subspace of ``dim`` dimensions.

    Centroids: unit vectors of the subspace; an entry: ``B (c + sigma z) + ambient w``,
    z ~ N(0, I_intrinsic), w ~ N(0, I_dim), normalised (B: dim x intrinsic_dim, orthonormal).
    """

    def __init__(
        self, n: int, n_classes: int, dim: int, sigma: float, seed: int, intrinsic_dim: int = 16, ambient: float = 0.005
    ):
        if not 1 <= intrinsic_dim <= dim:
            raise ValueError(f"intrinsic_dim must be between 1 and dim={dim}, got {intrinsic_dim}")
        self.intrinsic_dim, self.ambient = int(intrinsic_dim), float(ambient)
        gauss = np.random.default_rng([seed, 5]).standard_normal((dim, intrinsic_dim))
        self.basis = np.linalg.qr(gauss)[0].astype(np.float32)  # dim x intrinsic_dim, orthonormal columns
        super().__init__(n, n_classes, dim, sigma, seed)
        inner = np.random.default_rng([seed, 0]).standard_normal((n_classes, intrinsic_dim))
        self.inner_centroids = (inner / np.linalg.norm(inner, axis=1, keepdims=True)).astype(np.float32)
        self.centroids = self.inner_centroids @ self.basis.T  # unit: the basis is orthonormal

    def _draw(self, rng: np.random.Generator, labels: np.ndarray) -> np.ndarray:
        z = rng.standard_normal((len(labels), self.intrinsic_dim), dtype=np.float32)
        z *= np.float32(self.sigma)
        z += self.inner_centroids[labels]
        x = z @ self.basis.T
        if self.ambient:
            x += np.float32(self.ambient) * rng.standard_normal((len(labels), self.dim), dtype=np.float32)
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        return x

    def _query_draw(self, rng: np.random.Generator, labels: np.ndarray) -> np.ndarray:
        return self._draw(rng, labels)


def make_stream(
    family: str,
    n: int,
    n_classes: int,
    dim: int,
    sigma: float,
    seed: int,
    intrinsic_dim: int = 16,
    ambient: float = 0.005,
) -> SyntheticStream:
    if family == "gaussian":
        return SyntheticStream(n, n_classes, dim, sigma, seed)
    if family == "subspace":
        return SubspaceStream(n, n_classes, dim, sigma, seed, intrinsic_dim, ambient)
    raise ValueError(f"family must be one of {FAMILIES}, got {family!r}")
