"""Reference DNNs for the parallel runtime: an MLP and a small decoder-only Transformer LM.

Both are plain single-device modules; :func:`gnnpar.parallel.parallelize.parallelize` makes them
tensor, data and pipeline parallel.  Two choices make that possible without special
cases:

- layers live in an ``nn.ModuleDict`` (not an ``nn.ModuleList``), so a pipeline stage can
  delete the layers it does not hold and every remaining parameter keeps its name
  (``layers.3.attention.wq.weight`` on stage 1 is the same name as on one device);
- the attention infers its number of heads from the width of its projections, so a
  tensor-parallel rank that holds ``n_heads / tp`` heads runs the same code.

:class:`TransformerLM` lists its pipeline units (:meth:`TransformerLM.pipeline_units`),
and every top-level part may be ``None`` on a stage that does not hold it, as in
torchtitan's Llama.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from gnnpar.errors import ConfigError


def mlp(sizes: Sequence[int], activation: type[nn.Module] = nn.ReLU) -> nn.Sequential:
    """A multi-layer perceptron ``Linear -> activation -> ... -> Linear``.

    Args:
        sizes: Widths ``[in, hidden..., out]``; at least two.
        activation: Element-wise activation put between linear layers.

    Returns:
        The ``nn.Sequential`` (children named ``"0"``, ``"1"``, ...).

    Shapes:
        input ``[B, sizes[0]]``, output ``[B, sizes[-1]]``.
    """
    if len(sizes) < 2 or any(int(s) < 1 for s in sizes):
        raise ConfigError(
            f"sizes={list(sizes)} needs at least an input and an output width, all positive.",
            field="sizes",
            fix="pass e.g. sizes=[64, 256, 256, 10].",
        )
    layers: list[nn.Module] = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2:
            layers.append(activation())
    return nn.Sequential(*layers)


@dataclass(frozen=True)
class TransformerConfig:
    """Size of a :class:`TransformerLM`.

    Attributes:
        vocab_size: Number of token ids.
        dim: Model width.
        n_heads: Attention heads; ``dim`` must be divisible by it.
        n_layers: Transformer blocks.
        ffn_dim: Hidden width of the feed-forward network.
        max_seq_len: Longest sequence (size of the learned position table).
    """

    vocab_size: int = 256
    dim: int = 64
    n_heads: int = 4
    n_layers: int = 2
    ffn_dim: int = 256
    max_seq_len: int = 64

    def __post_init__(self) -> None:
        if self.dim % self.n_heads != 0:
            raise ConfigError(
                f"dim={self.dim} is not divisible by n_heads={self.n_heads}.",
                field="n_heads",
                fix="pick n_heads that divides dim.",
            )


class Embeddings(nn.Module):
    """Token plus learned position embeddings.

    Shapes:
        input ``[B, T]`` token ids, output ``[B, T, dim]``.
    """

    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.tok = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.pos = nn.Embedding(cfg.max_seq_len, cfg.dim)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:  # noqa: D102
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        out: torch.Tensor = self.tok(tokens) + self.pos(positions)
        return out


class Attention(nn.Module):
    """Causal multi-head self-attention; the head count follows the projection width.

    Shapes:
        input and output ``[B, T, dim]``.
    """

    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.head_dim = cfg.dim // cfg.n_heads
        self.wq = nn.Linear(cfg.dim, cfg.dim, bias=False)
        self.wk = nn.Linear(cfg.dim, cfg.dim, bias=False)
        self.wv = nn.Linear(cfg.dim, cfg.dim, bias=False)
        self.wo = nn.Linear(cfg.dim, cfg.dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        b, t, _ = x.shape
        # -1 heads: all of them on one device, n_heads / tp under tensor parallelism.
        q, k, v = (w(x).view(b, t, -1, self.head_dim).transpose(1, 2)
                   for w in (self.wq, self.wk, self.wv))
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y: torch.Tensor = self.wo(out.transpose(1, 2).reshape(b, t, -1))
        return y


class FeedForward(nn.Module):
    """Two-layer GELU feed-forward network.

    Shapes:
        input and output ``[B, T, dim]``.
    """

    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.w1 = nn.Linear(cfg.dim, cfg.ffn_dim)
        self.w2 = nn.Linear(cfg.ffn_dim, cfg.dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        y: torch.Tensor = self.w2(F.gelu(self.w1(x)))
        return y


class TransformerBlock(nn.Module):
    """Pre-norm block: ``x + attention(norm(x))``, then ``h + feed_forward(norm(h))``.

    Shapes:
        input and output ``[B, T, dim]``.
    """

    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.attention_norm = nn.LayerNorm(cfg.dim)
        self.attention = Attention(cfg)
        self.ffn_norm = nn.LayerNorm(cfg.dim)
        self.feed_forward = FeedForward(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        h: torch.Tensor = x + self.attention(self.attention_norm(x))
        out: torch.Tensor = h + self.feed_forward(self.ffn_norm(h))
        return out


class TransformerLM(nn.Module):
    """Decoder-only language model: embeddings, blocks, final norm, vocabulary head.

    A pipeline stage sets the parts it does not hold to ``None`` (and deletes blocks
    from ``layers``); its forward then takes hidden states instead of token ids and/or
    returns hidden states instead of logits.

    Args:
        cfg: Model size.

    Shapes:
        input ``[B, T]`` token ids (or ``[B, T, dim]`` hidden states on a later stage),
        output ``[B, T, vocab_size]`` logits (or ``[B, T, dim]`` on an earlier stage).
    """

    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embeddings: Embeddings | None = Embeddings(cfg)
        self.layers = nn.ModuleDict({str(i): TransformerBlock(cfg) for i in range(cfg.n_layers)})
        self.norm: nn.LayerNorm | None = nn.LayerNorm(cfg.dim)
        self.output: nn.Linear | None = nn.Linear(cfg.dim, cfg.vocab_size, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:  # noqa: D102
        h = self.embeddings(tokens) if self.embeddings is not None else tokens
        for layer in self.layers.values():
            h = layer(h)
        if self.norm is not None:
            h = self.norm(h)
        return self.output(h) if self.output is not None else h

    def pipeline_units(self) -> list[str]:
        """Names of the modules a pipeline may cut between, in execution order."""
        return ["embeddings", *(f"layers.{k}" for k in self.layers), "norm", "output"]


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy.

    Shapes:
        logits ``[B, T, V]``, targets ``[B, T]``; returns a scalar.
    """
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten())
