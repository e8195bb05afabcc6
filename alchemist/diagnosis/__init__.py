"""Hang diagnosis: which rank, and where.

- :mod:`~alchemist.diagnosis.progress`: stall detection from the ranks' metric files;
- :mod:`~alchemist.runtime.hooks`: what every rank installs at start-up (stacks on
  ``SIGUSR1``, a stall watchdog, a responder answering request files);
- :mod:`~alchemist.runtime.recorder`: PyTorch's flight recorder (collective sequence
  ids; a rank's dump when its code fails), the one module that touches its private API;
- :mod:`~alchemist.diagnosis.stacks`: reading faulthandler's dumps, finding the user's
  frame and the collective a rank waits in;
- :mod:`~alchemist.diagnosis.collect`: asking a job's ranks for their stacks (by signal
  locally, by request file anywhere);
- :mod:`~alchemist.diagnosis.report`: the one JSON report (classification, headline,
  per-rank entries, grouped stacks) every entry point shows;
- :mod:`~alchemist.diagnosis.bundle`: the debug bundle, one ``.tar.gz`` of the report,
  the ranks' stacks and flight recorders, log tails and the spec.

Diagnosis never changes a job's state. This package imports no torch (the recorder reads
torch inside a rank that has imported it already).
"""
