"""Link prediction in your own loop: a PyG GraphSAGE encoder, a dot-product or MLP decoder.

Partition a graph with link supervision once, then start one process per part::

    gnnpar-partition "synthetic:sbm?task=link&nodes=4096" --num-parts 2 --out parts/link-2
    torchrun --standalone --nproc-per-node 2 examples/link_prediction.py parts/link-2

(an OGB link dataset works the same: ``gnnpar-partition ogbl-citation2 ...``; any graph
with ``--task link --split 0.85,0.05,0.1``.)  Training batches come from
``gnnpar.DistLinkNeighborLoader``: each rank's training edges, one random negative pair
per positive drawn over all ranks' nodes, the batch's targets and their reverses hidden
from its message passing, laid out like PyG's ``LinkNeighborLoader`` output
(``edge_label_index`` batch-local, ``edge_label`` 1 then 0).  The encoder is
``torch_geometric.nn.models.GraphSAGE`` as PyG ships it; DDP synchronises it and the
decoder.  Evaluation is exact: full-neighbour embeddings of every node (layer by layer
on the partitioned graph), each test edge ranked against its fixed candidates, MRR as
``ogb.linkproppred.Evaluator`` computes it, across the ranks.  ``gnnpar-train --task
link`` runs the same with checkpoints and a run record.
"""

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch_geometric.nn.models import GraphSAGE

import gnnpar
from gnnpar.config import ArgumentParser
from gnnpar.evaluation.link import embeddings, link_metrics
from gnnpar.models.link import LinkDecoder, bce_sum

parser = ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("part_dir", help="partition directory (gnnpar-partition --out)")
parser.add_argument("--epochs", type=int, default=5)
parser.add_argument("--lr", type=float, default=0.01)
parser.add_argument("--decoder", choices=("dot", "mlp"), default="dot")
args = parser.parse_args()

ctx = gnnpar.init()
graph = gnnpar.DistGraph.load(args.part_dir, ctx)
features = gnnpar.DistFeatureStore(graph, ctx)
sampler = gnnpar.DistNeighborSampler(graph, ctx, gnnpar.Fanouts.for_graph([10, 10], graph, ctx),
                                     with_edges=True)
train = gnnpar.DistLinkNeighborLoader(sampler, features, "train", batch_size=512,
                                      neg_sampling="binary", num_neg=1)


class Predictor(torch.nn.Module):
    """Encoder and decoder; its forward scores a batch's labelled pairs (through DDP)."""

    def __init__(self, encoder: torch.nn.Module, decoder: LinkDecoder) -> None:
        super().__init__()
        self.encoder, self.decoder = encoder, decoder

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor,
                edge_label_index: torch.Tensor) -> torch.Tensor:
        h = self.encoder(x, edge_index)
        return self.decoder(h[edge_label_index[0]], h[edge_label_index[1]])


torch.manual_seed(0)  # the same initial weights on every rank
encoder = GraphSAGE(graph.meta.feat_dim, 64, 2, 64, dropout=0.5).to(ctx.device)
decoder = LinkDecoder(args.decoder, 64).to(ctx.device)
model = DistributedDataParallel(Predictor(encoder, decoder))
optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)

for epoch in range(args.epochs):
    train.set_epoch(epoch)
    model.train()
    loss_sum, pairs = torch.zeros((), device=ctx.device), 0
    for batch in train:
        batch = batch.to(ctx.device)
        score = model(batch.x, batch.edge_index, batch.edge_label_index)
        loss = bce_sum(score, batch.edge_label)
        optimizer.zero_grad()
        # Sum over this rank's pairs / pairs of all ranks (2 per positive), x DDP's mean.
        (loss * ctx.world_size / (2 * batch.global_batch_size)).backward()
        optimizer.step()
        loss_sum += loss.detach()
        pairs += batch.edge_label.numel()
    h = embeddings(encoder, graph, ctx, budget_bytes=256 << 20)
    metrics = link_metrics(h, decoder, graph, ctx, splits=("test",))
    sums = torch.tensor([loss_sum.item(), pairs], device=ctx.device)
    dist.all_reduce(sums)
    if ctx.is_main:
        print(f"epoch {epoch + 1}: loss {sums[0] / sums[1]:.4f}, test MRR "
              f"{metrics['test_mrr']:.4f}, hits@10 {metrics['test_hits@10']:.4f}")

gnnpar.shutdown()
