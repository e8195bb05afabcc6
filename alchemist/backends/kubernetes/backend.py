"""The Kubernetes backend: one Indexed Job plus a headless Service per Alchemist job.

The manifests come from :mod:`.manifests` (pure), the state rules from :mod:`.status`
(pure); this module only talks to the API server with the official ``kubernetes``
client, reading and writing raw JSON (``_preload_content=False``) so that what is sent
is exactly the dry run's dicts.

What survives the Job: when a job ends (or is cancelled) its final status is written to
``state.json`` in the job directory, so ``status`` keeps answering after the Job's
``ttlSecondsAfterFinished`` has removed it; the rank logs, metrics and checkpoints are on
the shared volume anyway.
"""

from __future__ import annotations

import abc
import contextlib
import copy
import dataclasses
import json
import time
from collections.abc import Iterator
from typing import Any

import yaml
from traitlets import MetaHasTraits

from alchemist.backends.api import Backend, DryRunInfo, JobRequest
from alchemist.backends.kubernetes import manifests as mf
from alchemist.backends.kubernetes import quota, slugs
from alchemist.backends.kubernetes.config import KubernetesConfig, load_jupyter_config
from alchemist.backends.kubernetes.status import (
    api_error,
    job_state_only,
    latest_pods,
    parse_time,
    status_from_objects,
)
from alchemist.errors import BackendError, JobNotFoundError, SpecError
from alchemist.job.session import SESSION_ENTRY, SessionDir, read_stop
from alchemist.job.spec import JobState, JobStatus


def _client() -> tuple[Any, Any, type[Exception]]:
    """The ``kubernetes`` client modules, imported on first use.

    Importing them takes seconds (hundreds of model modules), and a dry run needs none
    of it, so ``--dry-run`` stays fast.
    """
    try:
        from kubernetes import client, config
        from kubernetes.client.exceptions import ApiException
    except ImportError as e:
        raise BackendError(
            "the kubernetes backend needs the kubernetes client: pip install 'jupyter-alchemist[kubernetes]'"
        ) from e
    return client, config, ApiException


def _is_404(error: BaseException) -> bool:
    """Whether a BackendError raised by ``_api`` came from an HTTP 404."""
    return getattr(error.__cause__, "status", None) == 404


#: key of this backend's own record in state.json
STATE_KEY = "kubernetes"

_DRYRUN_HEADER = (
    "# Alchemist job {job_id}: created in this order. At creation the Service gets an\n"
    "# ownerReference to the Job (its uid is assigned then), so it goes with the Job.\n"
)


class _Meta(MetaHasTraits, abc.ABCMeta):
    """Traitlets' metaclass and the Backend ABC's, combined."""


class KubernetesBackend(KubernetesConfig, Backend, metaclass=_Meta):
    """Runs each job as an Indexed Job of ``workers`` pods on a Kubernetes cluster.

    Guarantees (beyond :class:`~alchemist.backends.api.Backend`'s):

    - ``submit`` first compares the job with the namespace's ResourceQuotas (when it may
      read them): a job that alone exceeds a hard limit is refused with a
      :class:`CapacityError` and nothing is created; one that fits but finds too little
      free is created, with a warning, and waits. Then it creates the Job, then the
      Service; if the Service cannot be created the Job is deleted again and the error
      raised, so nothing half-made is left behind.
    - ``status`` reads the Job, its pods and (while pods are missing) the Job's events;
      a pending pod's reason (unschedulable, image pull, quota) is the status reason.
    - ``cancel`` deletes the Job with background propagation (its pods and Service go
      with it) and records CANCELLED; a job that already ended is left as it is.
    - Every API error becomes one :class:`BackendError` line naming the fix.
    """

    name = "kubernetes"
    ships_files = True  # pods mount the Alchemist home, not the notebook's folder
    runs_sessions = True  # one pod per rank, rank 0's serving the controller

    def __init__(self, *, api_client: Any = None, **kwargs: Any) -> None:
        """Create the backend.

        Args:
            api_client: a ``kubernetes.client.ApiClient`` to use; by default one is made
                on first use from the in-cluster service account or the kubeconfig.
            **kwargs: traitlets arguments (``config=``, ``parent=``, or trait values).
                Without ``config`` and ``parent``, the ``KubernetesBackend`` section of
                the Jupyter server config files is read.
        """
        if "config" not in kwargs and "parent" not in kwargs:
            kwargs["config"] = load_jupyter_config()
        super().__init__(**kwargs)
        self._api_client = api_client

    # -- the API client ------------------------------------------------------------

    @property
    def api_client(self) -> Any:
        """The ``ApiClient``, made on first use (in-cluster config first, then kubeconfig)."""
        if self._api_client is None:
            kclient, kconfig, _ = _client()
            configuration = kclient.Configuration()
            try:
                kconfig.load_incluster_config(client_configuration=configuration)
            except kconfig.ConfigException:
                try:
                    kconfig.load_kube_config(
                        context=self.context or None, client_configuration=configuration
                    )
                except (kconfig.ConfigException, OSError, TypeError) as e:
                    raise BackendError(
                        "no Kubernetes configuration found: run in the cluster (a notebook pod)"
                        " or point KUBECONFIG at a kubeconfig"
                        + (f" with context {self.context!r}" if self.context else "")
                    ) from e
            self._api_client = kclient.ApiClient(configuration)
        return self._api_client

    @property
    def _core(self) -> Any:
        return _client()[0].CoreV1Api(self.api_client)

    @property
    def _batch(self) -> Any:
        return _client()[0].BatchV1Api(self.api_client)

    @contextlib.contextmanager
    def _api(self, doing: str, namespace: str) -> Iterator[None]:
        """Translate API and connection errors raised inside into one-line BackendErrors."""
        import urllib3

        api_exception = _client()[2]
        try:
            yield
        except api_exception as e:
            raise api_error(
                getattr(e, "status", None),
                getattr(e, "reason", None),
                getattr(e, "body", None),
                doing,
                namespace,
            ) from e
        except (urllib3.exceptions.HTTPError, OSError) as e:
            host = getattr(self.api_client.configuration, "host", "?")
            raise BackendError(
                f"cannot reach the Kubernetes API at {host} (to {doing}): check KUBECONFIG,"
                " the network, or that the cluster is up"
            ) from e

    def _call(self, fn: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """Call a client method and return the response body as JSON (exactly as served)."""
        resp = fn(*args, _preload_content=False, _request_timeout=self.request_timeout, **kwargs)
        data = resp.data
        return json.loads(data) if data else {}

    # -- settings and names -------------------------------------------------------------

    def settings(self) -> mf.Settings:
        """A snapshot of the configuration the manifests depend on."""
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(mf.Settings)}
        values["node_selector"] = dict(self.node_selector)
        values["tolerations"] = [dict(t) for t in self.tolerations]
        values["datasets"] = [dict(d) for d in self.datasets]
        return mf.Settings(**values)

    def _where(self, req: JobRequest) -> tuple[str, str]:
        """(namespace, Job name) of a job: as recorded at submission, else as it would be now."""
        record = (req.job_dir.read_state() or {}).get(STATE_KEY) or {}
        return record.get("namespace") or self.namespace, record.get("job") or slugs.job_name(
            req.job_id
        )

    # -- Backend hooks ------------------------------------------------------------------

    def _dryrun(self, req: JobRequest) -> DryRunInfo:
        spec = req.spec
        if spec.entry == SESSION_ENTRY and spec.resources.gpus > 1:
            raise SpecError(
                "on Kubernetes a session's rank is a pod with one GPU: ask for"
                f" -n {spec.workers * spec.resources.gpus} --gpus-per-worker 1 instead of"
                f" -n {spec.workers} --gpus-per-worker {spec.resources.gpus}"
            )
        objs = mf.make_manifests(req.job_id, req.owner, req.spec, req.job_dir, self.settings())
        text = _DRYRUN_HEADER.format(job_id=req.job_id) + yaml.safe_dump_all(
            objs, sort_keys=False, default_flow_style=False
        )
        return DryRunInfo(
            backend=self.name,
            request={"manifests": objs},
            text=text,
            extra={
                "namespace": objs[0]["metadata"]["namespace"],
                "k8s_name": objs[0]["metadata"]["name"],
            },
        )

    def _schedule(self, req: JobRequest, info: DryRunInfo) -> None:
        job_manifest, svc_manifest = info.request["manifests"]
        ns = job_manifest["metadata"]["namespace"]
        name = job_manifest["metadata"]["name"]
        quotas = self._quotas(ns)
        quota_wait = quota.check(job_manifest, quotas) if quotas else None
        if quota_wait and quota_wait not in info.warnings:
            info.warnings.append(quota_wait)
        with self._api(f"create Job {name}", ns):
            job = self._call(self._batch.create_namespaced_job, ns, job_manifest)
        svc = copy.deepcopy(svc_manifest)
        svc["metadata"]["ownerReferences"] = [mf.owner_reference(job)]
        try:
            with self._api(f"create Service {name}", ns):
                self._call(self._core.create_namespaced_service, ns, svc)
        except BackendError:
            with contextlib.suppress(BackendError):
                self._delete(ns, name)
            raise
        req.job_dir.write_state(
            backend=self.name,
            state=JobState.PENDING.value,
            **{
                STATE_KEY: {
                    "namespace": ns,
                    "job": name,
                    "uid": job.get("metadata", {}).get("uid"),
                    "submitted": time.time(),
                    **({"quota_wait": quota_wait} if quota_wait else {}),
                }
            },
        )

    def _recorded_final(self, req: JobRequest) -> JobStatus | None:
        state = req.job_dir.read_state() or {}
        record = state.get(STATE_KEY) or {}
        final = record.get("final")
        return JobStatus.from_dict(final) if final else None

    def _record_final(self, req: JobRequest, status: JobStatus) -> None:
        state = req.job_dir.read_state() or {}
        record = dict(state.get(STATE_KEY) or {})
        if record.get("final"):  # terminal states are final: the first one recorded wins
            return
        record["final"] = status.to_dict()
        req.job_dir.write_state(
            state=status.state.value,
            reason=status.reason,
            exit_code=status.exit_code,
            finished=status.finished,
            **{STATE_KEY: record},
        )

    def status(self, req: JobRequest) -> JobStatus:
        """The job's status from the cluster (see :func:`.status.status_from_objects`).

        Raises:
            JobNotFoundError: this backend never submitted the job.
            BackendError: the API cannot be reached or refuses (one line).
        """
        final = self._recorded_final(req)
        if final is not None:
            return final
        state = req.job_dir.read_state() or {}
        record = state.get(STATE_KEY)
        ns, name = self._where(req)
        try:
            with self._api(f"read Job {name}", ns):
                job = self._call(self._batch.read_namespaced_job, name, ns)
        except BackendError as e:
            if not _is_404(e):
                raise
            if record is None:
                raise JobNotFoundError(
                    f"job {req.job_id} is not known to the Kubernetes backend"
                ) from None
            if record.get("cancelling"):
                gone = _cancelled(req)
            else:
                gone = JobStatus(
                    JobState.FAILED,
                    f"the Kubernetes Job {name} was deleted before Alchemist saw it end"
                    " (by someone else, or its ttl expired): see the job's logs",
                    finished=time.time(),
                )
            self._record_final(req, gone)
            return self._recorded_final(req) or gone
        pods = self._pods(ns, req.job_id)
        events: list[dict[str, Any]] = []
        if len(latest_pods(pods)) < req.spec.workers and not _terminal_job(job):
            events = self._events(ns, name)
        status = status_from_objects(job, pods, events, (record or {}).get("quota_wait"))
        if status.state is JobState.SUCCEEDED:
            status = _session_end(req, status)
        if record and record.get("cancelling"):
            status = _cancelled(req)
        elif status.state is JobState.FAILED and "timeout" not in (status.reason or ""):
            status.reason = _rank_failure(req) or status.reason
        if status.state.is_terminal:
            self._record_final(req, status)
            return self._recorded_final(req) or status
        return status

    def cancel(self, req: JobRequest) -> None:
        """Delete the Job (its pods and Service go with it) and record CANCELLED. Idempotent.

        Raises:
            JobNotFoundError: this backend never submitted the job.
            BackendError: the API refused the deletion; nothing is recorded then.
        """
        if self.status(req).state.is_terminal:
            return
        ns, name = self._where(req)
        record = dict((req.job_dir.read_state() or {}).get(STATE_KEY) or {})
        record["cancelling"] = True
        req.job_dir.write_state(**{STATE_KEY: record})
        try:
            self._delete(ns, name)
        except BackendError:
            record.pop("cancelling", None)
            req.job_dir.write_state(**{STATE_KEY: record})
            raise
        self._record_final(req, _cancelled(req))

    # -- helpers beyond the contract ----------------------------------------------------

    def _delete(self, ns: str, name: str) -> None:
        """Delete a job's Job and Service; a missing one is fine."""
        body = {"propagationPolicy": "Background"}
        for doing, fn in (
            (f"delete Job {name}", self._batch.delete_namespaced_job),
            (f"delete Service {name}", self._core.delete_namespaced_service),
        ):
            try:
                with self._api(doing, ns):
                    self._call(fn, name, ns, body=body)
            except BackendError as e:
                if not _is_404(e):
                    raise

    def _quotas(self, ns: str) -> list[dict[str, Any]] | None:
        """The namespace's ResourceQuotas, or None when the API will not list them.

        A refusal (403: the Role may not read quotas; or any other API error) means no
        check, never a failed submission: the API server enforces the quotas anyway, pod
        by pod. Only an unreachable API server is an error (the Job could not be
        created either).
        """
        try:
            with self._api("list the resource quotas", ns):
                data = self._call(self._core.list_namespaced_resource_quota, ns)
        except BackendError as e:
            if getattr(e.__cause__, "status", None) is not None:
                return None
            raise
        return list(data.get("items") or [])

    def _pods(self, ns: str, job_id: str) -> list[dict[str, Any]]:
        selector = ",".join(f"{k}={v}" for k, v in mf.selector_labels(job_id).items())
        with self._api(f"list the pods of job {job_id}", ns):
            return list(
                self._call(self._core.list_namespaced_pod, ns, label_selector=selector).get("items")
                or []
            )

    def _events(self, ns: str, name: str) -> list[dict[str, Any]]:
        try:
            with self._api(f"list the events of Job {name}", ns):
                data = self._call(
                    self._core.list_namespaced_event,
                    ns,
                    field_selector=f"involvedObject.kind=Job,involvedObject.name={name}",
                )
        except BackendError:  # events only refine a reason: never fail status over them
            return []
        return list(data.get("items") or [])

    def list(self, owner: str) -> list[dict[str, Any]]:
        """The owner's Alchemist Jobs still in the namespace, newest first.

        Returns:
            One dict per Job: ``job_id``, ``owner``, ``name`` (of the Job),
            ``namespace``, ``created`` (UNIX time), ``state`` (a JobState value, from the
            Job alone), ``job_dir``.
        """
        ns = self.namespace
        selector = f"{mf.LABEL_MANAGED_BY}=alchemist,{mf.LABEL_OWNER}={slugs.label_value(owner)}"
        with self._api(f"list the Jobs of {owner}", ns):
            items = (
                self._call(self._batch.list_namespaced_job, ns, label_selector=selector).get(
                    "items"
                )
                or []
            )
        out = []
        for job in items:
            meta = job.get("metadata", {})
            ann = meta.get("annotations") or {}
            if ann.get(mf.ANNOTATION_OWNER, owner) != owner:  # a slug collision
                continue
            out.append(
                {
                    "job_id": ann.get(mf.ANNOTATION_JOB_ID)
                    or (meta.get("labels") or {}).get(mf.LABEL_JOB_ID),
                    "owner": ann.get(mf.ANNOTATION_OWNER, owner),
                    "name": meta.get("name"),
                    "namespace": meta.get("namespace") or ns,
                    "created": parse_time(meta.get("creationTimestamp")),
                    "state": job_state_only(job).value,
                    "job_dir": ann.get(mf.ANNOTATION_JOB_DIR),
                }
            )
        out.sort(key=lambda d: d["created"] or 0, reverse=True)
        return out

    def pod_logs(
        self,
        req: JobRequest,
        worker: int,
        *,
        follow: bool = False,
        tail_lines: int | None = None,
        wait: float = 0.0,
    ) -> Iterator[str]:
        """Lines of worker ``worker``'s pod log, straight from the API (``kubectl logs``).

        The rank logs in the job directory (:meth:`logs`) hold the same output per rank
        and outlive the pods; this shows what happens before the runtime starts (image,
        torchrun, rendezvous) and works while the volume is unreachable.

        Args:
            req: the job.
            worker: the worker (pod completion index), 0..workers-1.
            follow: keep streaming until the container ends.
            tail_lines: only the last lines.
            wait: seconds to wait for the pod to exist and its container to start.

        Yields:
            Lines without their newline. Nothing if the pod has not started in time.
        """
        ns, _ = self._where(req)
        deadline = time.monotonic() + wait
        while True:
            pod = latest_pods(self._pods(ns, req.job_id)).get(worker)
            phase = (pod or {}).get("status", {}).get("phase")
            if pod is not None and phase != "Pending":
                break
            if time.monotonic() >= deadline:
                return
            time.sleep(0.5)
        pod_name = pod["metadata"]["name"]
        kwargs: dict[str, Any] = {"container": mf.CONTAINER_NAME, "follow": follow}
        if tail_lines is not None:
            kwargs["tail_lines"] = tail_lines
        with self._api(f"read the log of pod {pod_name}", ns):
            resp = self._core.read_namespaced_pod_log(
                pod_name,
                ns,
                _preload_content=False,
                _request_timeout=None if follow else self.request_timeout,
                **kwargs,
            )
            try:
                pending = b""
                for chunk in resp.stream(4096, decode_content=True):
                    pending += chunk
                    *lines, pending = pending.split(b"\n")
                    for line in lines:
                        yield line.decode("utf-8", "replace")
                if pending:
                    yield pending.decode("utf-8", "replace")
            finally:
                resp.release_conn()


def _session_stop(req: JobRequest) -> tuple[str, str] | None:
    """How a session was asked to stop (``(state, reason)`` of its stop marker), or None
    for a batch job or a session nobody asked to stop."""
    marker = SessionDir(req.job_dir).stop_marker
    if req.spec.entry != SESSION_ENTRY or not marker.exists():
        return None
    return read_stop(marker)


def _cancelled(req: JobRequest) -> JobStatus:
    """The end of a job whose Job Alchemist deleted: cancelled by the user, or, for a
    session the notebook gave up on (it did not start), failed with the marker's reason."""
    asked = _session_stop(req)
    if asked is not None and asked[0] == JobState.FAILED.value:
        return JobStatus(JobState.FAILED, asked[1], finished=time.time())
    return JobStatus(JobState.CANCELLED, req.job_dir.cancel_reason(), finished=time.time())


def _session_end(req: JobRequest, status: JobStatus) -> JobStatus:
    """A session's pods end only when asked to (the stop marker): its state and reason
    are the marker's (the user's stop, or rank 0's idle timeout)."""
    asked = _session_stop(req)
    if asked is None:
        return status
    return dataclasses.replace(status, state=JobState(asked[0]), reason=asked[1])


def _rank_failure(req: JobRequest) -> str | None:
    """ "rank r failed: <last error line>" from the rank logs on the shared volume, if any.

    The pod's own log holds only the launcher's output (each rank writes its own log in
    the job directory), so the ranks' logs say best what went wrong.
    """
    from alchemist.job.outcomes import failure_reason

    reason = failure_reason(req.job_dir, None)
    return reason if reason.startswith("rank ") else None


def _terminal_job(job: dict[str, Any]) -> bool:
    return job_state_only(job).is_terminal
