"""Best-valid model selection: the evaluation with the best validation figure, kept.

As OGB's protocol and PyG's examples select a model: every evaluation (``--eval-every``
epochs, and after the last) is compared by its validation figure; the best one's
figures are the run's headline (the summary's ``best``, beside the last epoch's), its
weights are kept in ``OUT/best`` (a checkpoint through
:func:`~gnnpar.train.checkpoint.save_checkpoint`, read by ``gnnpar-export --best`` and
``gnnpar-predict --best``), and ``--early-stop P`` ends the run after ``P`` evaluations
without a better one, but not before ``--min-epochs`` (Keras's ``start_from_epoch``,
Lightning's ``min_epochs``: early in a link run the validation MRR can fall below the
untrained model's for a few epochs before it rises).

The figure that selects (:func:`selection_metric`): validation accuracy for node
classification (sampled neighbourhoods in sample mode, exact in full mode, as the epoch's
record holds it), validation MRR for link prediction, Hits@50 (``ogbl-collab``'s metric)
when the negatives are shared and there is no MRR.  A later evaluation replaces the best
only when strictly higher (ties keep the earlier epoch, as OGB's examples do).

The tracker holds nothing a checkpoint must carry: :meth:`BestValid.replay` rebuilds it
from the record's epochs, which a checkpoint holds, so a resumed run selects as an
uninterrupted one.

Example::

    best = BestValid.replay(record.epochs, task="link", patience=5)
    if best.update(entry):     # entry: the epoch just evaluated
        save_best_checkpoint()
    if best.exhausted:
        stop()
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

FIGURES = ("val_acc", "test_acc", "val_mrr", "test_mrr", "val_hits", "test_hits")
"""The figures of the best evaluation kept in the summary (an epoch record's names)."""
SHARED_NEGATIVES_HITS = "hits@50"
"""What selects a link model whose evaluation has no MRR (shared negatives)."""


def selection_metric(entry: dict[str, Any], task: str) -> tuple[str, float] | None:
    """``(name, value)`` of the validation figure that selects, or ``None`` (not evaluated).

    Args:
        entry: An epoch of the run record (:data:`~gnnpar.train.record.EPOCH_FIELDS`).
        task: ``"node"`` or ``"link"``.
    """
    if task != "link":
        value = entry.get("val_acc")
        return None if value is None else ("val_acc", float(value))
    if entry.get("val_mrr") is not None:
        return "val_mrr", float(entry["val_mrr"])
    hits = entry.get("val_hits") or {}
    if SHARED_NEGATIVES_HITS in hits:
        return f"val_{SHARED_NEGATIVES_HITS}", float(hits[SHARED_NEGATIVES_HITS])
    return None


@dataclass
class BestValid:
    """The best evaluation so far, and how many evaluations have not beaten it.

    Args:
        task: ``"node"`` or ``"link"`` (what :func:`selection_metric` reads).
        patience: ``--early-stop``: evaluations without a better one that end the run
            (0: never).
        min_epochs: ``--min-epochs``: epochs before which the run never ends early.

    Attributes:
        entry: The best evaluated epoch's record entry (``None`` before the first).
        metric: Its selecting figure's name (``"val_mrr"``).
        value: Its selecting figure.
        since: Evaluations after it that did not beat it.
        epochs: Epochs done at the last evaluation.
    """

    task: str
    patience: int = 0
    min_epochs: int = 0
    entry: dict[str, Any] | None = None
    metric: str | None = None
    value: float | None = None
    since: int = 0
    epochs: int = 0

    @classmethod
    def replay(cls, epochs: Iterable[dict[str, Any]], task: str, patience: int = 0,
               min_epochs: int = 0) -> BestValid:
        """The tracker after the recorded ``epochs`` (a resumed run's, or none)."""
        best = cls(task, patience, min_epochs)
        for entry in epochs:
            best.update(entry)
        return best

    def update(self, entry: dict[str, Any]) -> bool:
        """Take the epoch just recorded into account; whether it is the new best.

        An epoch that was not evaluated changes nothing (so the run stops only right
        after an evaluation, whose figures are then the last epoch's).
        """
        found = selection_metric(entry, self.task)
        if found is None:
            return False
        self.epochs = entry["epoch"] + 1
        name, value = found
        if self.value is not None and value <= self.value:
            self.since += 1
            return False
        self.entry, self.metric, self.value, self.since = entry, name, value, 0
        return True

    @property
    def exhausted(self) -> bool:
        """Whether ``--early-stop`` ends the run.

        ``patience`` evaluations without a gain, and ``min_epochs`` epochs done.
        """
        return 0 < self.patience <= self.since and self.epochs >= self.min_epochs

    def summary(self, checkpoint: str | None) -> dict[str, Any] | None:
        """The summary's ``best`` (``None`` before the first evaluation).

        Args:
            checkpoint: Where its weights are (``OUT/best``), or ``None`` when not kept.
        """
        if self.entry is None:
            return None
        return {"epoch": self.entry["epoch"], "metric": self.metric, "value": self.value,
                **{k: self.entry.get(k) for k in FIGURES},
                "evaluations_after": self.since, "checkpoint": checkpoint}
