"""Harnesses shared by the test folders (``tests/`` mirrors the package: one folder per
part, the kind of test as a marker: ``browser``, ``k8s``, ``gpu``, ``slow``).

- ``helpers.py``: another Unix account for cross-user tests, small waits;
  ``ipython.py``: the ``ip`` fixture (a real IPython shell with the extension);
  ``jobs.py``: jobs written straight into a home, for listings and the REST API;
  ``diagnose.py``: jobs that hang on purpose, and waiting for a diagnosis;
  ``ecosystem.py``: what a library's job logged.
- ``hubproc.py``: a real embedded JupyterHub process; ``lab.py``: a real JupyterLab with
  the panel, driven by headless Chromium.
- ``chart.py``: the Helm chart rendered; ``builders.py``: the images built with buildah.
- Two Kubernetes API stand-ins, for the two clients Alchemist uses:
  ``k8s_standin.py`` (a threaded HTTP server for the official synchronous ``kubernetes``
  client of the backend: label and field selectors, ownerReference garbage collection,
  pod logs with ``follow``, injected faults, and kubelets that run pods as processes)
  and ``kmock_apiserver.py`` (kmock's emulator for ``kubernetes-asyncio``, KubeSpawner's
  client: watches and server-side apply). They stay two because each models what the
  other lacks and neither client is pointed at the other's: merging them means
  writing watches and server-side apply into the first, or selectors, garbage
  collection and pod logs into the second — a change of its own (docs/kubernetes.md).
"""
