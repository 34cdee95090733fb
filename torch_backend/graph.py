"""The gnn benchmark's two-layer GCN in PyTorch (jax_backend.graph is the same network), with no graph library.

The graph (features, edges, their normalisation weights) is held as non-persistent buffers: constants that
move with the module to the device but are neither parameters nor part of the state_dict, so they are not in
the shared weights and torch.func.functional_call leaves them alone. The forward pass runs over the whole
graph and returns the logits of the nodes whose ids it is given.
"""

from __future__ import annotations

import torch
from torch import nn

from bench_contract.data.graph import GCN_HIDDEN, Graph


class GraphConv(nn.Module):
    """Kipf & Welling's layer, A_hat (h W) + b: the linear map first (PyG's `lin`, no bias), then the
    normalised aggregation as a scatter-add over target nodes, then the bias."""

    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__()
        self.lin = nn.Linear(in_features, out_features, bias=False)
        self.bias = nn.Parameter(torch.zeros(out_features))

    def forward(self, h: torch.Tensor, source: torch.Tensor, target: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        h = self.lin(h)
        messages = h.index_select(0, source) * weight[:, None]
        # Out-of-place index_add: an in-place add into a fresh tensor would be refused under torch.func's grad.
        # Summed in the messages' dtype: under bf16 autocast the float32 edge weights promote them to float32, as
        # they do JAX's segment sum (jax_backend.graph), and index_add refuses a source of another dtype.
        return messages.new_zeros(h.shape).index_add(0, target, messages) + self.bias


class GCN(nn.Module):
    def __init__(self, graph: Graph, num_classes: int, variant: str) -> None:
        super().__init__()
        hidden = GCN_HIDDEN[variant]
        self.conv1 = GraphConv(graph.num_features, hidden)
        self.conv2 = GraphConv(hidden, num_classes)
        for name in ("features", "source", "target", "weight"):
            self.register_buffer(name, torch.from_numpy(getattr(graph, name)), persistent=False)

    def forward(self, nodes: torch.Tensor) -> torch.Tensor:
        edges = (self.source, self.target, self.weight)
        h = torch.relu(self.conv1(self.features, *edges))
        return self.conv2(h, *edges).index_select(0, nodes)
