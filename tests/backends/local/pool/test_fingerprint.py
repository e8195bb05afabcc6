"""Which settings of the notebook's environment rebuild the warm pool."""

from __future__ import annotations

import os

from alchemist.backends.local.pool import fingerprint


def test_a_variable_torch_reads_when_called_does_not_rebuild_the_pool() -> None:
    """Importing Lightning in the kernel sets ``PYTORCH_NVML_BASED_CUDA_CHECK``; it is
    read by each ``torch.cuda.is_available()``, not at import: a pool built without it
    serves the job (every switch between the notebook and a terminal rebuilt it)."""
    base = {k: v for k, v in os.environ.items() if k != "PYTORCH_NVML_BASED_CUDA_CHECK"}
    with_lightning = {**base, "PYTORCH_NVML_BASED_CUDA_CHECK": "1"}
    assert fingerprint.parts(with_lightning) == fingerprint.parts(base)
    # The control: a variable read at import (thread pinning) does rebuild it.
    assert fingerprint.parts({**base, "OMP_PROC_BIND": "true"}) != fingerprint.parts(base)
