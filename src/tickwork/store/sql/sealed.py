"""The columns that hold secrets, written sealed and read back (tickwork.sealing).

* tw_jobs.webhook_secrets and tw_tenants.webhook_secrets (signing secrets): always sealed.
* tw_jobs.target: sealed when a webhook target has a secret header or a URL password
  (domain/masking.py decides which); other targets stay plain JSON, so a task or a plain
  webhook costs nothing to read on the fire path.
* tw_jobs.on_failure (the alert webhook): sealed when it has headers or a URL password.

A store without a keyring (tests, `memory://`) writes plain JSON and refuses to read a sealed
value with a clear error; the runtime always gives one (runtime/secret_keys.py). Reading
accepts both forms, so rows written before encryption keep working until they are re-sealed.

The fire path reads these texts for every leased run; a burst leases thousands of runs that
share a handful of distinct texts, so each distinct text is opened and parsed once (`lru_cache`
per instance, keyed by the stored text).
"""

from __future__ import annotations

import functools
import json

from tickwork.domain.jobs import AlertTarget, TaskTarget, WebhookTarget
from tickwork.domain.masking import has_secret_headers, url_password
from tickwork.sealing import Keyring, SealedSecretError, is_sealed

CACHED_TEXTS = 4096

JOB_TARGET = "tw_jobs.target"
JOB_SECRETS = "tw_jobs.webhook_secrets"
JOB_ALERT = "tw_jobs.on_failure"
TENANT_SECRETS = "tw_tenants.webhook_secrets"


class SealedColumns:
    def __init__(self, keyring: Keyring | None) -> None:
        self.keyring = keyring
        self.cached_target = functools.lru_cache(maxsize=CACHED_TEXTS)(self.read_target)
        self.cached_tenant_secrets = functools.lru_cache(maxsize=CACHED_TEXTS)(
            self.read_tenant_secrets
        )
        self.cached_alert = functools.lru_cache(maxsize=CACHED_TEXTS)(self.read_alert)

    # -- writing ----------------------------------------------------------------------------
    def write_target(self, target: WebhookTarget | TaskTarget) -> str:
        text = _target_json(target)
        secret = isinstance(target, WebhookTarget) and (
            has_secret_headers(target.headers) or url_password(target.url) is not None
        )
        return self._seal(text, JOB_TARGET) if secret else text

    def write_secrets(self, secrets: tuple[str, ...], *, purpose: str = JOB_SECRETS) -> str | None:
        """None when there are none, so a job or tenant without secrets stores NULL."""
        return self._seal(json.dumps(list(secrets)), purpose) if secrets else None

    def write_alert(self, alert: AlertTarget | None) -> str | None:
        if alert is None:
            return None
        text = json.dumps({"url": alert.url, "headers": dict(alert.headers)}, separators=(",", ":"))
        secret = bool(alert.headers) or url_password(alert.url) is not None
        return self._seal(text, JOB_ALERT) if secret else text

    # -- reading ----------------------------------------------------------------------------
    def read_target(self, text: str, secrets: str | None = None) -> WebhookTarget | TaskTarget:
        """The target from its column, with the job's secrets (a separate column) put back in."""
        raw = json.loads(self._open(text, JOB_TARGET))
        if raw["type"] == "task":
            return TaskTarget(name=raw["name"], args=raw["args"], timeout_s=raw["timeout_s"])
        return WebhookTarget(
            url=raw["url"],
            method=raw["method"],
            headers=raw["headers"],
            body=raw["body"],
            timeout_s=raw["timeout_s"],
            secrets=self.read_secrets(secrets),
            signed=raw.get("signed", True),
        )

    def read_secrets(self, text: str | None, purpose: str = JOB_SECRETS) -> tuple[str, ...]:
        return () if text is None else tuple(json.loads(self._open(text, purpose)))

    def read_tenant_secrets(self, text: str | None) -> tuple[str, ...]:
        return self.read_secrets(text, TENANT_SECRETS)

    def read_alert(self, text: str | None) -> AlertTarget | None:
        if text is None:
            return None
        raw = json.loads(self._open(text, JOB_ALERT))
        return AlertTarget(url=raw["url"], headers=raw["headers"])

    # -- re-sealing -------------------------------------------------------------------------
    def needs_reseal(self, text: str | None, *, always_secret: bool) -> bool:
        """True if `text` is not sealed with the current key but should be (a column that
        always holds secrets, or a sealed value under an older key). Plain values of the
        sometimes-secret columns are judged by `write_*` when the caller rewrites them."""
        if text is None or self.keyring is None:
            return False
        if is_sealed(text):
            return not self.keyring.sealed_with_current(text)
        return always_secret

    # -- the cipher -------------------------------------------------------------------------
    def _seal(self, text: str, purpose: str) -> str:
        return text if self.keyring is None else self.keyring.seal(text, purpose=purpose)

    def _open(self, text: str, purpose: str) -> str:
        if not is_sealed(text):
            return text
        if self.keyring is None:
            raise SealedSecretError(
                f"{purpose}: the value is encrypted and this process has no secret keys (set"
                " TICKWORK_SECRET_KEYS, or run it with the data directory that holds secrets.key)"
            )
        return self.keyring.open(text, purpose=purpose)


def _target_json(target: WebhookTarget | TaskTarget) -> str:
    if isinstance(target, TaskTarget):
        raw = {"type": "task", "name": target.name, "args": target.args}
        return json.dumps({**raw, "timeout_s": target.timeout_s}, separators=(",", ":"))
    fields = {
        "type": "webhook",
        "url": target.url,
        "method": target.method,
        "headers": dict(target.headers),
        "body": target.body,
        "timeout_s": target.timeout_s,
    }
    if not target.signed:  # only the exception is written: older rows have no key and sign
        fields["signed"] = False
    return json.dumps(fields, separators=(",", ":"))
