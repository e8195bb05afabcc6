"""The parts of ``benchmarks/scale.py``: one module per cost (index, metrics, logs,
users, soak), each with ``run(smoke: bool) -> list[Series]``."""
