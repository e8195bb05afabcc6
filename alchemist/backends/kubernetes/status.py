"""Pure translation of Kubernetes objects (as JSON dicts) into Alchemist states and messages.

Kept apart from the API calls so the rules can be read, and tested, on their own.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from alchemist.backends.kubernetes.manifests import ANNOTATION_COMPLETION_INDEX, CONTAINER_NAME
from alchemist.errors import BackendError
from alchemist.job.spec import JobState, JobStatus

#: container waiting reasons that will not fix themselves; shown with a hint
_STUCK_WAITING = {
    "ErrImagePull": "the image cannot be pulled; check c.KubernetesBackend.image",
    "ImagePullBackOff": "the image cannot be pulled; check c.KubernetesBackend.image",
    "InvalidImageName": "the image name is invalid; fix c.KubernetesBackend.image",
    "CreateContainerConfigError": "the container cannot be configured",
    "CreateContainerError": "the container cannot be created",
}


def parse_time(value: str | None) -> float | None:
    """UNIX time of a Kubernetes timestamp (``2026-12-02T18:00:00Z``), or None."""
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def one_line(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def last_line(text: str | None) -> str:
    """The last non-empty line of a log tail (the error, for a Python traceback)."""
    for line in reversed((text or "").splitlines()):
        if any(ch.isalnum() for ch in line):  # skip rules like "=====" of torchrun's summary
            return one_line(line.strip())
    return ""


def pod_index(pod: dict[str, Any]) -> int | None:
    meta = pod.get("metadata", {})
    raw = (meta.get("annotations") or {}).get(ANNOTATION_COMPLETION_INDEX) or (
        meta.get("labels") or {}
    ).get(ANNOTATION_COMPLETION_INDEX)
    try:
        return int(raw) if raw is not None else None
    except ValueError:
        return None


def latest_pods(pods: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """The newest pod of each completion index (older ones were replaced after failures).

    Creation times have a resolution of one second, so on a tie the pod that has not
    ended wins: a replacement is always created after its predecessor failed.
    """

    def key(pod: dict[str, Any]) -> tuple[str, bool]:
        phase = pod.get("status", {}).get("phase")
        return (
            pod.get("metadata", {}).get("creationTimestamp") or "",
            phase not in ("Failed", "Succeeded"),
        )

    out: dict[int, dict[str, Any]] = {}
    for pod in pods:
        idx = pod_index(pod)
        if idx is not None and (idx not in out or key(pod) >= key(out[idx])):
            out[idx] = pod
    return out


def _container_status(pod: dict[str, Any]) -> dict[str, Any]:
    for cs in pod.get("status", {}).get("containerStatuses") or []:
        if cs.get("name") == CONTAINER_NAME:
            return dict(cs)
    return {}


def pod_problem(pod: dict[str, Any]) -> str | None:
    """Why a pod is not running, in one line, or None if nothing is wrong (yet)."""
    status = pod.get("status", {})
    if status.get("phase") != "Pending":
        return None
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            msg = one_line(cond.get("message") or cond.get("reason") or "no node fits")
            return f"cannot be scheduled ({cond.get('reason') or 'Unschedulable'}): {msg}"
    waiting = _container_status(pod).get("state", {}).get("waiting") or {}
    reason = waiting.get("reason")
    if reason in _STUCK_WAITING:
        msg = one_line(waiting.get("message") or "")
        return f"{reason}: {_STUCK_WAITING[reason]}" + (f" ({msg})" if msg else "")
    return None


def pod_failure(pod: dict[str, Any]) -> tuple[int | None, str]:
    """Exit code and one-line description of a failed pod."""
    terminated = (
        _container_status(pod).get("state", {}).get("terminated")
        or _container_status(pod).get("lastState", {}).get("terminated")
        or {}
    )
    code = terminated.get("exitCode")
    detail = last_line(terminated.get("message"))
    if not detail:
        detail = one_line(pod.get("status", {}).get("message") or terminated.get("reason") or "")
    text = f"exited with code {code}" if code is not None else "failed"
    if terminated.get("reason") == "OOMKilled":
        text += " (out of memory: ask for more memory per worker)"
    return code, f"{text}: {detail}" if detail else text


def _conditions(job: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        c["type"]: c
        for c in job.get("status", {}).get("conditions") or []
        if c.get("status") == "True" and "type" in c
    }


def job_state_only(job: dict[str, Any]) -> JobState:
    """A coarse state from the Job alone (for listings, without reading pods)."""
    conds = _conditions(job)
    if "Complete" in conds or "SuccessCriteriaMet" in conds:
        return JobState.SUCCEEDED
    if "Failed" in conds or "FailureTarget" in conds:
        return JobState.FAILED
    st = job.get("status", {})
    if (st.get("ready") or 0) >= (job.get("spec", {}).get("completions") or 1):
        return JobState.RUNNING
    return JobState.RESTARTING if st.get("failed") else JobState.PENDING


def status_from_objects(
    job: dict[str, Any],
    pods: list[dict[str, Any]],
    events: list[dict[str, Any]] | None = None,
    quota_wait: str | None = None,
) -> JobStatus:
    """The :class:`JobStatus` of a job from its Job, its pods and the Job's events.

    Rules: the Job's ``Complete``/``Failed`` conditions decide terminal states (the
    reason names the failed worker and the last line of its log when known);
    ``Suspended`` means queued (Kueue). Otherwise the job is RUNNING once every
    worker's newest pod runs, RESTARTING while a failed pod is being replaced, else
    PENDING, with the first problem (unschedulable, image pull, pod creation refused by
    a quota) as the reason. ``quota_wait`` (what :func:`.quota.check` said at submission:
    the namespace's quota had too little free) is the reason while workers are missing
    and nothing more precise is known (no events, or no right to read them).
    """
    conds = _conditions(job)
    workers = int(job.get("spec", {}).get("completions") or 1)
    jst = job.get("status", {})
    failures = int(jst.get("failed") or 0)
    newest = latest_pods(pods)
    # restarts: failed pods that were replaced (the final failure of a job is no restart)
    restarts = sum(
        1 for p in pods if p.get("status", {}).get("phase") == "Failed" and p not in newest.values()
    )
    ranks: dict[str, Any] = {}
    for idx, pod in sorted(newest.items()):
        info: dict[str, Any] = {
            "pod": pod.get("metadata", {}).get("name"),
            "phase": pod.get("status", {}).get("phase", "Pending"),
        }
        node = pod.get("spec", {}).get("nodeName")
        if node:
            info["node"] = node
        problem = pod_problem(pod)
        if problem:
            info["reason"] = problem
        ranks[str(idx)] = info
    starts = [
        t
        for p in newest.values()
        if p.get("status", {}).get("phase") in ("Running", "Succeeded", "Failed")
        for t in [parse_time(p.get("status", {}).get("startTime"))]
        if t is not None
    ]
    started = min(starts) if starts else parse_time(jst.get("startTime"))

    def finished_time(cond: dict[str, Any]) -> float | None:
        return parse_time(jst.get("completionTime")) or parse_time(cond.get("lastTransitionTime"))

    done = conds.get("Complete") or conds.get("SuccessCriteriaMet")
    if done is not None:
        return JobStatus(JobState.SUCCEEDED, None, 0, restarts, started, finished_time(done), ranks)
    failed = conds.get("Failed") or conds.get("FailureTarget")
    if failed is not None:
        code: int | None = None
        reason = ""
        # the newest pods first, then replaced ones (newest first): who failed last
        older = sorted(
            (p for p in pods if p not in newest.values()),
            key=lambda p: p.get("metadata", {}).get("creationTimestamp") or "",
            reverse=True,
        )
        for pod in [*(p for _, p in sorted(newest.items())), *older]:
            if pod.get("status", {}).get("phase") == "Failed":
                code, desc = pod_failure(pod)
                reason = f"worker {pod_index(pod)} {desc}"
                break
        cond_reason = failed.get("reason")
        if cond_reason == "DeadlineExceeded":
            reason = "the job ran past its timeout and was stopped"
        elif not reason:
            reason = one_line(failed.get("message") or cond_reason or "the Job failed")
        elif cond_reason == "BackoffLimitExceeded" and failures > 1:
            reason += f" (after {failures} worker failures; raise max_restarts to allow more)"
        return JobStatus(
            JobState.FAILED, reason, code, restarts, started, finished_time(failed), ranks
        )
    susp = conds.get("Suspended")
    if susp is not None or job.get("spec", {}).get("suspend"):
        msg = one_line((susp or {}).get("message") or "")
        return JobStatus(
            JobState.PENDING,
            "queued: waiting for the cluster's queue (Kueue) to admit all workers"
            + (f" ({msg})" if msg else ""),
            None,
            restarts,
            None,
            None,
            ranks,
        )
    up = [
        i for i, p in newest.items() if p.get("status", {}).get("phase") in ("Running", "Succeeded")
    ]
    if len(up) >= workers:
        return JobStatus(JobState.RUNNING, None, None, restarts, started, None, ranks)
    why: str | None = None
    for key, info in sorted(ranks.items(), key=lambda kv: int(kv[0])):
        if "reason" in info:
            why = f"worker {key} {info['reason']}"
            break
    if why is None and len(newest) < workers:
        for ev in sorted(events or [], key=lambda e: e.get("lastTimestamp") or "", reverse=True):
            if ev.get("reason") == "FailedCreate":
                why = "workers cannot be created: " + describe_create_failure(
                    ev.get("message") or ""
                )
                break
    if why is None and len(newest) < workers and quota_wait:
        why = f"queued: {quota_wait}"
    if failures and len(up) < workers:
        state = JobState.RESTARTING
        if why is None:
            why = f"{failures} worker pod(s) failed; replacing them"
    else:
        state = JobState.PENDING
        if why is None and newest:
            why = f"{len(up)} of {workers} workers running"
    return JobStatus(state, why, None, restarts, started, None, ranks)


def describe_create_failure(message: str) -> str:
    """A refused pod or object creation (often a quota) as one line naming the fix."""
    msg = one_line(message)
    if "exceeded quota" in msg:
        quota = msg[msg.index("exceeded quota") :]
        return (
            f"the namespace's resource quota is exhausted ({quota}): ask for fewer workers,"
            " GPUs, CPU or memory, wait for other jobs to finish, or ask for a larger quota"
        )
    return msg


def api_error(
    status: int | None, reason: str | None, body: Any, doing: str, namespace: str
) -> BackendError:
    """Translate a Kubernetes API error into one :class:`BackendError` line that names the fix.

    Args:
        status: HTTP status code.
        reason: HTTP reason phrase.
        body: the response body (a JSON ``Status`` object as text or bytes), if any.
        doing: what Alchemist was doing, e.g. ``"create Job alchemist-x"``.
        namespace: the namespace it was doing it in.
    """
    message = ""
    k8s_reason = ""
    if body:
        try:
            data = json.loads(body)
            message = str(data.get("message") or "")
            k8s_reason = str(data.get("reason") or "")
        except (ValueError, TypeError, AttributeError):
            message = body.decode(errors="replace") if isinstance(body, bytes) else str(body)
    message = one_line(message or reason or "")
    where = f"in namespace {namespace}"
    if status == 401:
        return BackendError(
            f"the Kubernetes API did not accept Alchemist's credentials (to {doing}): renew"
            " your kubeconfig, or the notebook pod's service account token"
        )
    if status == 403 and "exceeded quota" in message:
        return BackendError(f"cannot {doing}: {describe_create_failure(message)}")
    if status == 403:
        return BackendError(
            f"Kubernetes forbids Alchemist to {doing} {where} ({message}): ask an administrator"
            " for a Role that allows it, or set c.KubernetesBackend.namespace"
            " (ALCHEMIST_K8S_NAMESPACE) to a namespace you may use"
        )
    if status == 409 or k8s_reason == "AlreadyExists":
        return BackendError(
            f"cannot {doing}: it already exists {where} ({message}); a job id is used once:"
            " cancel the old job or submit again to get a new id"
        )
    if status == 404 and "namespaces" in message and "not found" in message:
        return BackendError(
            f"namespace {namespace} does not exist: set c.KubernetesBackend.namespace"
            " (ALCHEMIST_K8S_NAMESPACE) to your namespace"
        )
    if status == 422 or k8s_reason == "Invalid":
        return BackendError(f"Kubernetes rejected the request to {doing}: {message}")
    return BackendError(
        f"the Kubernetes API failed to {doing} {where} ({status} {reason or k8s_reason}): {message}"
    )
