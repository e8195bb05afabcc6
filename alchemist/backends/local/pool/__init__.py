"""The warm pool: a user's local jobs fork their ranks from a process that has already
imported torch, instead of starting a fresh interpreter per rank.

One pool per user and interpreter (:mod:`.state` says where it lives and what it says of
itself). Its daemon (:mod:`.daemon`, a session of its own, so it outlives the kernel)
holds a loopback rendezvous store and a pristine *zygote* (:mod:`.zygote`): a process
that imported torch, numpy and Alchemist's runtime, then waits, and for each job forks
one fresh process per rank. A job's supervisor asks for its ranks through
:mod:`.client` and watches them as it watches torchrun (:mod:`alchemist.backends.local.warm`).
The environment's :mod:`.fingerprint` decides whether the pool may serve a job.
See docs/architecture.md, "The warm pool".
"""
