"""The gnn benchmark's contract: the graph both frameworks' GCNs hold, its normalisation, the graph file reader
and the synthetic graph.

Node classification fits the generic training loop by making a sample a node: x holds node ids (int32) and
y their labels, so batches, shuffling, sharding and per-sample gradients work on node ids. The graph itself
(features, edges, normalisation) is held by the model as constants and the forward pass runs over the whole
graph, returning the logits of the batch's nodes.

Real data is one file in --data-dir, `graph.npz` (numpy's savez), with:
- `edges` (2, E) int: source and target node of each edge; treated as undirected (both directions are used,
  duplicates and self-loops in the file are dropped, then every node gets one self-loop);
- `features` (N, F) float: one feature row per node;
- `labels` (N,) int in 0..C-1;
- `train_mask`, `val_mask`, `test_mask` (N,) bool: the nodes of each split (Planetoid's convention).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bench_contract.data.datasets import SPLIT_SEED, DataError, Dataset

GRAPH_FILE = "graph.npz"
# Hidden units of the two-layer GCN (Kipf & Welling use 16); no dropout, so the frameworks match step by step.
GCN_HIDDEN = {"full": 16, "tiny": 8}


@dataclass(frozen=True, eq=False)  # compared and hashed by identity: it holds arrays
class Graph:
    """A graph with self-loops as an edge list, each edge weighted by D^-1/2 (A+I) D^-1/2.

    Message passing sends h[source] * weight to target: out = segment_sum(weight * h[source], target).
    """

    features: np.ndarray  # (N, F) float32
    source: np.ndarray  # (E,) int32, self-loops included
    target: np.ndarray  # (E,) int32
    weight: np.ndarray  # (E,) float32

    @property
    def num_nodes(self) -> int:
        return self.features.shape[0]

    @property
    def num_features(self) -> int:
        return self.features.shape[1]


def normalized_graph(edges: np.ndarray, features: np.ndarray) -> Graph:
    """Symmetrise the edges, replace self-loops by exactly one per node, and weight edge (i, j) by
    1 / sqrt(deg(i) deg(j)) with degrees counted in A + I (Kipf & Welling's renormalisation trick).

    Computed once here, in numpy, so both frameworks aggregate with bit-identical coefficients."""
    n = features.shape[0]
    src, dst = edges
    off = src != dst
    pairs = np.unique(np.concatenate([np.stack([src[off], dst[off]], 1), np.stack([dst[off], src[off]], 1)]), axis=0)
    loops = np.arange(n)
    source = np.concatenate([pairs[:, 0], loops]).astype(np.int32)
    target = np.concatenate([pairs[:, 1], loops]).astype(np.int32)
    degree = np.bincount(target, minlength=n).astype(np.float64)
    weight = (1.0 / np.sqrt(degree[source] * degree[target])).astype(np.float32)
    return Graph(np.ascontiguousarray(features, dtype=np.float32), source, target, weight)


def load_graph(data_dir: str | None):
    if not data_dir:
        raise DataError(f"gnn needs --data-dir pointing at a folder with {GRAPH_FILE} "
                        "(edges, features, labels, train_mask, val_mask, test_mask)")
    path = Path(data_dir) / GRAPH_FILE
    if not path.is_file():
        raise DataError(f"{path} does not exist")
    keys = ("edges", "features", "labels", "train_mask", "val_mask", "test_mask")
    with np.load(path, allow_pickle=False) as stored:
        missing = [k for k in keys if k not in stored.files]
        if missing:
            raise DataError(f"{path} lacks the arrays {', '.join(missing)}")
        arrays = {k: stored[k] for k in keys}
    features, labels, edges = arrays["features"], arrays["labels"], arrays["edges"]
    n = len(labels)
    if features.ndim != 2 or features.shape[0] != n:
        raise DataError(f"{path}: features have shape {features.shape}, expected ({n}, F) for {n} labels")
    if edges.ndim != 2 or edges.shape[0] != 2 or not np.issubdtype(edges.dtype, np.integer):
        raise DataError(f"{path}: edges must be an integer array of shape (2, E), got {edges.dtype} {edges.shape}")
    if edges.size and (edges.min() < 0 or edges.max() >= n):
        raise DataError(f"{path}: edges name nodes outside 0..{n - 1}")
    if not np.issubdtype(labels.dtype, np.integer) or labels.min() < 0:
        raise DataError(f"{path}: labels must be non-negative integers")
    masks = {}
    for split in ("train", "val", "test"):
        mask = arrays[f"{split}_mask"]
        if mask.shape != (n,) or mask.dtype != np.bool_:
            raise DataError(f"{path}: {split}_mask must be a bool array of shape ({n},)")
        if not mask.any():
            raise DataError(f"{path}: {split}_mask selects no node")
        masks[split] = np.flatnonzero(mask).astype(np.int32)
    graph = normalized_graph(edges.astype(np.int64), features)
    return _dataset("real", graph, labels.astype(np.int32), masks, int(labels.max()) + 1)


def _dataset(source: str, graph: Graph, labels: np.ndarray, nodes: dict[str, np.ndarray], num_classes: int):
    t, v, s = nodes["train"], nodes["val"], nodes["test"]
    return Dataset("gnn", source, t, labels[t], v, labels[v], s, labels[s], num_classes, graph=graph)


SYNTHETIC_CLASSES = 4
SYNTHETIC_FEATURES = 16
IN_COMMUNITY_DEGREE = 6
OUT_COMMUNITY_DEGREE = 1


def synthetic_graph(samples: int):
    """A stochastic block model: `samples` nodes in four communities, each node linked to a few nodes of its
    own community and fewer of the others; labels are the communities, and features are the community's
    centre under heavy noise, so a node's neighbourhood says more about its label than its own features."""
    rng = np.random.default_rng(SPLIT_SEED)
    labels = rng.integers(SYNTHETIC_CLASSES, size=samples).astype(np.int32)
    members = [np.flatnonzero(labels == c) for c in range(SYNTHETIC_CLASSES)]
    edges = []
    for node in range(samples):
        own = members[labels[node]]
        edges += [(node, int(j)) for j in rng.choice(own, size=min(IN_COMMUNITY_DEGREE, len(own)))]
        edges += [(node, int(j)) for j in rng.integers(samples, size=OUT_COMMUNITY_DEGREE)]
    centres = rng.standard_normal((SYNTHETIC_CLASSES, SYNTHETIC_FEATURES))
    features = centres[labels] + 2.0 * rng.standard_normal((samples, SYNTHETIC_FEATURES))
    graph = normalized_graph(np.array(edges, dtype=np.int64).T, features)
    # The same split sizes as every synthetic data set (a tenth each for validation and test).
    order = rng.permutation(samples).astype(np.int32)
    tenth = max(1, samples // 10)
    nodes = {"test": order[:tenth], "val": order[tenth : 2 * tenth], "train": order[2 * tenth :]}
    return _dataset("synthetic", graph, labels, nodes, SYNTHETIC_CLASSES)
