"""What only the benchmarks measure: activations that autograd holds for backward."""

from __future__ import annotations

import torch
from torch.distributed.tensor import DTensor

from gnnpar.parallel.measure import is_parameter, tensor_bytes


class _Held:
    """A saved activation; gives its bytes back to the meter when autograd frees it."""

    def __init__(self, meter: SavedActivationMeter, t: torch.Tensor) -> None:
        self.meter, self.tensor = meter, t
        local = t.to_local() if isinstance(t, DTensor) else t
        try:
            self.key = local.untyped_storage().data_ptr() if local.numel() else id(local)
        except RuntimeError:  # a wrapper subclass (an async collective's result): no storage
            self.key = id(local)
        self.nbytes = tensor_bytes(t)
        meter._acquire(self.key, self.nbytes)

    def __del__(self) -> None:
        self.meter._release(self.key)


class SavedActivationMeter(torch.autograd.graph.saved_tensors_hooks):
    """Peak bytes of activations that autograd holds for backward, inside ``with``.

    Parameters (and views of them) are not counted; a storage saved by several
    operations counts once.

    Attributes:
        live: Bytes held now.
        peak: Most bytes held at once since entering.
    """

    def __init__(self) -> None:
        self.live = 0
        self.peak = 0
        self._refs: dict[int, list[int]] = {}
        super().__init__(self._pack, self._unpack)

    def __enter__(self) -> SavedActivationMeter:  # type: ignore[override]  # noqa: D105
        super().__enter__()
        return self

    def _pack(self, t: torch.Tensor) -> object:
        return t if is_parameter(t) else _Held(self, t)

    @staticmethod
    def _unpack(obj: object) -> torch.Tensor:
        return obj.tensor if isinstance(obj, _Held) else obj  # type: ignore[return-value]

    def _acquire(self, key: int, nbytes: int) -> None:
        ref = self._refs.setdefault(key, [0, nbytes])
        if ref[0] == 0:
            self.live += nbytes
            self.peak = max(self.peak, self.live)
        ref[0] += 1

    def _release(self, key: int) -> None:
        ref = self._refs[key]
        ref[0] -= 1
        if ref[0] == 0:
            self.live -= ref[1]
            del self._refs[key]
