"""The job protocol: what the notebook, the server, the launchers and every rank agree on.

The ground floor of Alchemist: it imports nothing of Alchemist but :mod:`alchemist.errors`
(the layers contract in ``pyproject.toml`` checks it), so any process may load it cheaply.

- :mod:`~alchemist.job.spec`: the job spec and its states, the rank environment names
- :mod:`~alchemist.job.options`: every job option (flags, REST schema, form)
- :mod:`~alchemist.job.algorithms`: the algorithm catalogue and its options
- :mod:`~alchemist.job.jobdir`: every path of a job directory, ``state.json``'s schema
- :mod:`~alchemist.job.outcomes`: what each rank's code did; a job's outcome
- :mod:`~alchemist.job.config`: where Alchemist keeps its state, and its limits
- :mod:`~alchemist.job.patterns`: ``--include``/``--exclude`` file patterns
"""
