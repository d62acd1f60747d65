"""Model averaging / local SGD for the minibatch trainer (``--sync every:H``).

With ``H = 1`` (the default) every step all-reduces the gradients (DDP): synchronous
training, exactly as without this module.  With ``H > 1`` each rank takes ``H`` optimizer
steps on its own gradients (DDP's ``no_sync``: no gradient all-reduce), then the
parameters of all ranks are averaged in one all-reduce
(``torch.distributed.algorithms.model_averaging.utils.average_parameters``, the primitive
of torch's ``PeriodicModelAverager``), so gradient traffic falls by about ``H``.  With
``--sync-warmup W`` the first ``W`` steps of the run are synchronous and local SGD starts
after them (post-local SGD, Lin et al. 2020, torch's ``PostLocalSGDOptimizer``);
``--sync-optimizer`` averages the optimizer's state (Adam's moments) with the
parameters.  ``--sync-groups G:h`` is the hierarchical variant (torch's
``HierarchicalModelAverager``): between the global averages, every ``h`` local steps the
parameters are also averaged within groups of ``G`` consecutive ranks (e.g. the GPUs of
one machine, whose links are faster), one subgroup all-reduce.

The schedule is a pure function of the global step ``epoch * steps_per_epoch + step``
(the averager holds no state), and the parameters *and* the optimizer state are also
averaged at the end of every epoch and before every checkpoint: every rank then holds the
same model for evaluation and saves what every other rank would, so a resumed run
continues with the same weights as an uninterrupted one (both average at the same steps).
Averaging is counted in the run record as kind ``average`` (ring bytes of the flat
parameters, like ``grad``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gnnpar.errors import ConfigError, DistributedError

if TYPE_CHECKING:  # torch is imported where it is used: the config (and --help) need none
    import torch
    import torch.distributed as dist
    from torch import nn

    from gnnpar.comm import CommStats
    from gnnpar.distributed import DistContext

SYNC_FIX = ("pass --sync every:H with an integer H >= 1 (1: synchronous gradients; H: "
            "average the parameters every H steps).")
GROUPS_FIX = ("pass --sync-groups G:h (average within groups of G consecutive ranks every "
              "h steps, 1 <= h < H), or none.")
_SPEC = re.compile(r"every:(\d+)")
_GROUPS = re.compile(r"(\d+):(\d+)")


def parse_sync(text: str) -> int:
    """The period ``H`` of ``--sync every:H``; raise :class:`ConfigError` otherwise."""
    m = _SPEC.fullmatch(str(text).strip())
    if m is None or int(m.group(1)) < 1:
        raise ConfigError(f"got {text!r}.", field="train.sync", fix=SYNC_FIX)
    return int(m.group(1))


def parse_groups(text: str | None, period: int) -> tuple[int, int]:
    """``(G, h)`` of ``--sync-groups G:h`` (``(0, 0)`` for none); raise otherwise."""
    if text is None:
        return 0, 0
    m = _GROUPS.fullmatch(str(text).strip())
    if m is None or int(m.group(1)) < 1 or not 1 <= int(m.group(2)) < period:
        raise ConfigError(f"got {text!r} with --sync every:{period}.",
                          field="train.sync_groups", fix=GROUPS_FIX)
    return int(m.group(1)), int(m.group(2))


@dataclass(frozen=True)
class LocalSGD:
    """When a run's steps synchronise (see the module docstring).

    Attributes:
        period: ``H``: average every ``H`` local steps (1: synchronous DDP).
        warmup: Synchronous steps at the start of the run (post-local SGD).
        optimizer_state: Average the optimizer's state too at every averaging step.
        group_size: ``G`` of the hierarchical variant (0: none).
        group_period: ``h``: average within the groups every ``h`` local steps.
    """

    period: int = 1
    warmup: int = 0
    optimizer_state: bool = False
    group_size: int = 0
    group_period: int = 0

    @property
    def synchronous(self) -> bool:
        """Whether every step all-reduces its gradients."""
        return self.period == 1

    def local(self, global_step: int) -> bool:
        """Whether step ``global_step`` keeps its gradients local (no all-reduce)."""
        return not self.synchronous and global_step >= self.warmup

    def averages_after(self, global_step: int) -> bool:
        """Whether the parameters are averaged over all ranks after step ``global_step``."""
        return self.local(global_step) and (global_step + 1 - self.warmup) % self.period == 0

    def group_averages_after(self, global_step: int) -> bool:
        """Whether they are averaged within the groups only after step ``global_step``."""
        return (self.group_size > 0 and self.local(global_step)
                and not self.averages_after(global_step)
                and (global_step + 1 - self.warmup) % self.group_period == 0)


def average_model(module: nn.Module, optimizer: torch.optim.Optimizer | None,
                  ctx: DistContext, stats: CommStats | None,
                  group: dist.ProcessGroup | None = None) -> None:
    """Average ``module``'s parameters (and ``optimizer``'s state) over the ranks.

    Collective over ``group`` (default: all ranks of ``ctx``): one all-reduce of the flat
    parameters, one of the flat optimizer state (its floating-point tensors other than
    ``step``; all ranks of ``ctx`` only), both on the parameters' device.
    """
    import torch
    import torch.distributed as dist
    from torch.distributed.algorithms.model_averaging.utils import average_parameters

    from gnnpar.comm import all_gather_ints, all_reduce_sum, record_all_reduce

    params = [p for p in module.parameters()]
    size = ctx.world_size if group is None else dist.get_world_size(group)
    if stats is not None and params:
        flat = torch.empty(sum(p.numel() for p in params), dtype=params[0].dtype)
        record_all_reduce(stats, "average", flat, size)
    average_parameters(iter(params), group if group is not None else ctx.group)  # type: ignore[arg-type]  # None: WORLD
    if optimizer is None:
        return
    states = [t for p in params for k, t in sorted(optimizer.state.get(p, {}).items())
              if k != "step" and isinstance(t, torch.Tensor) and t.is_floating_point()]
    if not states:
        return
    flat = torch.cat([t.reshape(-1) for t in states])
    sizes = all_gather_ints(ctx, [flat.numel()])
    if bool((sizes != sizes[0]).any()):  # a mismatched all-reduce would hang on NCCL
        raise DistributedError(f"the ranks' optimizer states differ in size "
                               f"({sizes.view(-1).tolist()}, rank order); they cannot be "
                               "averaged.", fix="drop --sync-optimizer, or use an optimizer "
                               "that keeps state for every parameter on every rank.")
    if stats is not None:
        record_all_reduce(stats, "average", flat, ctx.world_size)
    flat = all_reduce_sum(ctx, flat) / ctx.world_size
    at = 0
    for t in states:
        t.copy_(flat[at:at + t.numel()].view_as(t))
        at += t.numel()
