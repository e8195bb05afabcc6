"""Analysis helpers for the paper notebooks: intervals and tests, an async-SGD
simulator, the large-batch knee, the gradient noise scale and run provenance.

Kept in the package, not in notebook cells, so that unit tests can check them
(``tests/algorithms/test_analysis_*.py``, ``tests/algorithms/test_asyncsim.py``).
"""
