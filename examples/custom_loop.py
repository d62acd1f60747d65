"""Your own training loop: a stock PyG GraphSAGE on gnnpar's distributed minibatches.

Partition once, then start one process per part::

    gnnpar-partition synthetic:sbm --num-parts 2 --out parts/sbm-2
    torchrun --standalone --nproc-per-node 2 examples/custom_loop.py parts/sbm-2 --epochs 5

What differs from PyG's single-GPU loop is the setup (join the process group, load this
rank's part, serve its feature rows, a loader over all parts), ``batch.loss(out)``
(the seeds' cross-entropy weighted so that DDP's average is the mean over every rank's
seeds, also when a rank's batch is empty) and ``gnnpar.nn.inference`` /
``gnnpar.evaluation.node.accuracy`` for the exact full-neighbour evaluation over all ranks.
"""

import torch
from torch.nn.parallel import DistributedDataParallel
from torch_geometric.nn.models import GraphSAGE

import gnnpar
from gnnpar.config import ArgumentParser
from gnnpar.evaluation.node import accuracy
from gnnpar.nn.inference import inference

parser = ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("part_dir", help="partition directory (gnnpar-partition --out)")
parser.add_argument("--epochs", type=int, default=5)
parser.add_argument("--lr", type=float, default=0.005)
args = parser.parse_args()

ctx = gnnpar.init()  # torchrun's environment (or a world of one); picks the device
graph = gnnpar.DistGraph.load(args.part_dir, ctx)  # this rank's part
features = gnnpar.DistFeatureStore(graph, ctx)  # owned rows here, remote rows by id
fanouts = gnnpar.Fanouts.for_graph([10, 10], graph, ctx)  # validated, capped (all ranks agree)
sampler = gnnpar.DistNeighborSampler(graph, ctx, fanouts)
loader = gnnpar.DistNeighborLoader(sampler, features, "train", batch_size=1024)

torch.manual_seed(0)  # the same initial weights on every rank
model = GraphSAGE(graph.meta.feat_dim, 128, 2, graph.meta.num_classes, dropout=0.5)
ddp = DistributedDataParallel(model.to(ctx.device))
optimizer = torch.optim.Adam(ddp.parameters(), lr=args.lr)

for epoch in range(args.epochs):
    ddp.train()
    total = torch.zeros((), device=ctx.device)  # the epoch's losses, read once at its end
    for batch in loader:  # the next epoch's batches on every pass
        batch = batch.to(ctx.device)
        optimizer.zero_grad()
        loss = batch.loss(ddp(batch.x, batch.edge_index))
        loss.backward()
        optimizer.step()
        total += loss.detach()
    logits = inference(model, graph, features)  # exact, every node this rank owns
    acc = accuracy(logits, graph, ctx, "test")  # over all ranks
    if ctx.is_main:
        print(f"epoch {epoch + 1}: loss {float(total) / len(loader):.4f}, test accuracy {acc:.4f}")

gnnpar.shutdown()
