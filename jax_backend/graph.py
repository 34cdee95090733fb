"""The gnn benchmark's two-layer GCN in Flax, layer for layer torch_backend.graph, with no graph library.

The graph is a module attribute: constants closed over by the compiled step, not variables, so they are
not in the shared weights and not differentiated. The forward pass runs over the whole graph and returns
the logits of the nodes whose ids it is given.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from bench_contract.data.graph import GCN_HIDDEN, Graph
from jax_backend import autocast


class GraphConv(nn.Module):
    """A_hat (h W) + b: the linear map ("lin", no bias), the normalised aggregation as a segment sum over
    target nodes, then the bias (PyTorch's GraphConv.bias)."""

    features: int

    @nn.compact
    def __call__(self, h, source, target, weight):
        h = autocast.dense(self.features, use_bias=False, name="lin")(h)
        out = jax.ops.segment_sum(h[source] * weight[:, None], target, num_segments=h.shape[0])
        return out + self.param("bias", nn.initializers.zeros, (self.features,))


class GCN(nn.Module):
    graph: Graph
    num_classes: int
    variant: str

    @nn.compact
    def __call__(self, nodes):
        g = self.graph
        edges = (jnp.asarray(g.source), jnp.asarray(g.target), jnp.asarray(g.weight))
        h = nn.relu(GraphConv(GCN_HIDDEN[self.variant], name="conv1")(jnp.asarray(g.features), *edges))
        return GraphConv(self.num_classes, name="conv2")(h, *edges)[nodes]


def gcn(graph: Graph, num_classes: int, variant: str) -> nn.Module:
    return GCN(graph, num_classes, variant)
