"""The artifact layer: every file and folder gnnpar writes or reads passes through here.

gnnpar writes partitions, dataset directories and caches, run directories (record,
configuration, checkpoint, metrics, predictions), exported models and pictures.  Each is
an *artifact* of one :class:`~gnnpar.artifacts.kinds.ArtifactKind`, and one contract
holds for all of them (``docs/artifacts.md``):

Every write (:mod:`~gnnpar.artifacts.directory`, :mod:`~gnnpar.artifacts.files`)

* goes to a temporary sibling first and is renamed into place when complete;
* carries gnnpar's ownership marker: a directory's marker file (``meta.json``,
  ``record.json``, ``index.json``, ...) lists every file gnnpar put there, a file carries
  its kind's marker (an exported model's ``.json``, a picture's metadata);
* never replaces what gnnpar did not write, and under ``--overwrite`` removes exactly what
  the marker lists (:mod:`~gnnpar.artifacts.ownership`);
* holds a lock beside the output, so that a second writer is refused with the holder's
  process id and start time (:mod:`~gnnpar.artifacts.lock`).

Every read (:mod:`~gnnpar.artifacts.documents`, :mod:`~gnnpar.artifacts.arrays`,
:mod:`~gnnpar.artifacts.checks`) checks digests before use, every size before it
allocates, dtypes, shapes and the agreement between files, and that model weights are
finite, and fails with one error naming the file, the field and the fix.

Nothing is ever unpickled.
"""
