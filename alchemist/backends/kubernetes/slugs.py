"""All DNS-safe naming of Kubernetes objects, in one place (as kubespawner's ``slugs.py``).

Kubernetes names and label values have tight rules (RFC 1035 labels for Services and
for the pod hostnames of an Indexed Job, 63-character label values). Alchemist ids and
user names do not follow them, so every name we send goes through this module. A name
that had to be changed or shortened gets a short hash of the original appended, so two
different inputs never map to the same slug.
"""

from __future__ import annotations

import hashlib
import re

#: Longest Job name: the pods of an Indexed Job get the hostname ``<job>-<index>``, which
#: must stay a 63-character DNS label even for index 99999.
MAX_JOB_NAME = 52
#: Longest label value allowed by Kubernetes.
MAX_LABEL_VALUE = 63

_LABEL_VALUE_RE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_DNS_LABEL_RE = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


def _hash(text: str, n: int = 8) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:n]


def is_dns_label(name: str) -> bool:
    """Whether ``name`` is a valid RFC 1035 label (Service names, pod hostnames)."""
    return len(name) <= 63 and bool(_DNS_LABEL_RE.match(name))


def is_label_value(value: str) -> bool:
    """Whether ``value`` is a valid Kubernetes label value."""
    return len(value) <= MAX_LABEL_VALUE and bool(_LABEL_VALUE_RE.match(value))


def dns_label(text: str, *, prefix: str = "a", max_length: int = 63) -> str:
    """An RFC 1035 label derived from ``text``: lowercase letters, digits and '-'.

    The result is ``text`` itself when that is already safe; otherwise the safe
    characters followed by ``-<hash of text>``. It always starts with a letter
    (``prefix`` is put in front when it would not) and is at most ``max_length`` long.
    """
    if len(text) <= max_length and _DNS_LABEL_RE.match(text):
        return text
    safe = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    if not safe or not safe[0].isalpha():
        safe = f"{prefix}-{safe}" if safe else prefix
    suffix = _hash(text)
    safe = safe[: max_length - len(suffix) - 1].rstrip("-")
    return f"{safe}-{suffix}"


def label_value(text: str) -> str:
    """A label value derived from ``text`` (unchanged when already valid).

    Runs of invalid characters become '-', and a hash of the original is appended so
    that two different inputs (``a@b`` and ``a#b``) never share a value.
    """
    if is_label_value(text):
        return text
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-_.")
    suffix = _hash(text)
    safe = safe[: MAX_LABEL_VALUE - len(suffix) - 1].rstrip("-_.")
    return f"{safe}-{suffix}" if safe else suffix


def job_name(job_id: str) -> str:
    """The Kubernetes Job (and headless Service) name of an Alchemist job.

    ``alchemist-<job id>`` when that is short and safe; always a DNS label of at most
    :data:`MAX_JOB_NAME` characters, so pod hostnames ``<job>-<index>`` stay valid.
    """
    return dns_label(f"alchemist-{job_id}", max_length=MAX_JOB_NAME)
