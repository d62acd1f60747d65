"""Your own training loop: a stock PyG GraphSAGE on gnnpar's distributed minibatches.

Partition once, then start one process per part::

    gnnpar-partition synthetic:sbm --num-parts 2 --out parts/sbm-2
    torchrun --standalone --nproc-per-node 2 examples/custom_loop.py parts/sbm-2 --epochs 5

Everything gnnpar-specific is the first five lines of the setup: join the process group,
load this rank's part, serve its feature rows, and iterate over minibatches sampled across
the parts.  The model is ``torch_geometric.nn.models.GraphSAGE`` as PyG ships it, in
``DistributedDataParallel``; a batch is a PyG ``Data`` laid out like ``NeighborLoader``'s.

Every rank takes the same number of steps, but a rank with fewer training nodes gets
smaller batches, or empty ones.  The loss is therefore summed over the rank's seeds and
divided by the seeds of all ranks in the step (``batch.global_batch_size``): after DDP's
averaging (hence the ``world_size``) the update is the global mean — and an empty batch
contributes zero, not ``nan``.  Rank 0 prints the loss and the sampled test accuracy of
each epoch.
"""

import argparse

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch_geometric.nn.models import GraphSAGE

import gnnpar

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("part_dir", help="partition directory (gnnpar-partition --out)")
parser.add_argument("--epochs", type=int, default=5)
parser.add_argument("--lr", type=float, default=0.005)
args = parser.parse_args()

ctx = gnnpar.init()  # torchrun's environment (or a world of one); picks the device
graph = gnnpar.DistGraph.load(args.part_dir, ctx)  # this rank's part
features = gnnpar.DistFeatureStore(graph, ctx)  # owned rows here, remote rows by id
train = gnnpar.DistNeighborLoader(graph, features, [10, 10], "train", batch_size=1024)
test = gnnpar.DistNeighborLoader(graph, features, [10, 10], "test", batch_size=4096,
                                 shuffle=False)

torch.manual_seed(0)  # the same initial weights on every rank
meta = graph.meta
model = DistributedDataParallel(GraphSAGE(meta.feat_dim, 128, 2, meta.num_classes,
                                          dropout=0.5).to(ctx.device))
optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)

for epoch in range(args.epochs):
    train.set_epoch(epoch)
    model.train()
    loss_sum, seeds = torch.zeros((), device=ctx.device), 0
    for batch in train:
        batch = batch.to(ctx.device)
        out = model(batch.x, batch.edge_index)[: batch.batch_size]
        loss = F.cross_entropy(out, batch.y[: batch.batch_size], reduction="sum")
        optimizer.zero_grad()
        (loss * ctx.world_size / batch.global_batch_size).backward()
        optimizer.step()
        loss_sum += loss.detach()
        seeds += batch.batch_size

    model.eval()
    right, tested = torch.zeros((), device=ctx.device), 0
    with torch.no_grad():
        for batch in test:
            batch = batch.to(ctx.device)
            pred = model.module(batch.x, batch.edge_index)[: batch.batch_size].argmax(-1)
            right += (pred == batch.y[: batch.batch_size]).sum()
            tested += batch.batch_size
    sums = torch.tensor([loss_sum.item(), seeds, right.item(), tested], device=ctx.device)
    dist.all_reduce(sums)  # over the ranks
    if ctx.is_main:
        print(f"epoch {epoch + 1}: loss {sums[0] / sums[1]:.4f}, "
              f"test accuracy {sums[2] / sums[3]:.4f} (sampled)")

gnnpar.shutdown()
