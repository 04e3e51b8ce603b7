"""The audit trail: every change made through the API, who made it, when and from where.

`AuditTrail` wraps the app. For each `/v1` request that could change something (POST, PUT,
PATCH, DELETE) and was made with a valid key, it records one `AuditEntry` after the answer is
sent: the key (id, prefix, role, tenant), the route (`PATCH /v1/jobs/{job_id}`), the resource,
the tenant it belongs to, the status and the caller's address. Refused attempts (403, 404, 422)
are recorded too: they show what a key tried. Requests without a valid key are not (they are
logged): anyone could fill the table otherwise.

Handlers add what only they know through `noted(...)` (the id of a job just created, the tenant
of the job they touched); the request's note lives in a context variable, so no handler needs
the request object for it. An audit write that fails is logged and does not fail the request,
whose change is already made.
"""

from __future__ import annotations

import logging
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Final

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tickwork.clock import Clock
from tickwork.domain.audit import AuditEntry
from tickwork.domain.keys import Principal
from tickwork.store.base import ScheduleStore

__all__ = ["AuditTrail", "noted"]

log = logging.getLogger("tickwork.api.audit")

CHANGES: Final = frozenset({"POST", "PUT", "PATCH", "DELETE"})
# Path parameters -> the kind of resource they name.
_KINDS: Final = (
    ("job_id", "job"),
    ("run_id", "run"),
    ("key_id", "key"),
    ("tenant", "tenant"),
    ("name", "tenant"),
)


@dataclass(slots=True)
class _Note:
    principal: Principal | None = None
    resource: str | None = None
    tenant: str | None = None


_CURRENT: ContextVar[_Note | None] = ContextVar("tickwork_audit_note", default=None)


def noted(
    *, principal: Principal | None = None, resource: str | None = None, tenant: str | None = None
) -> None:
    """Tell the audit trail about this request (no-op outside an audited request)."""
    note = _CURRENT.get()
    if note is None:
        return
    if principal is not None:
        note.principal = principal
    if resource is not None:
        note.resource = resource
    if tenant is not None:
        note.tenant = tenant


class AuditTrail:
    def __init__(self, app: ASGIApp, *, store: ScheduleStore, clock: Clock) -> None:
        self.app = app
        self.store = store
        self.clock = clock

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or scope["method"] not in CHANGES
            or not scope["path"].startswith("/v1/")
        ):
            await self.app(scope, receive, send)
            return
        note = _Note()
        token = _CURRENT.set(note)
        status = 500

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            _CURRENT.reset(token)
            if note.principal is not None:
                await self._record(scope, note, status)

    async def _record(self, scope: Scope, note: _Note, status: int) -> None:
        who = note.principal
        assert who is not None
        client = scope.get("client")
        entry = AuditEntry(
            at=self.clock.now(),
            key_id=who.key_id,
            key_prefix=who.key_prefix,
            role=who.role.value,
            actor_tenant=who.tenant,
            action=f"{scope['method']} {_template(scope)}",
            resource=note.resource or _resource(scope.get("path_params") or {}),
            tenant=note.tenant or who.tenant,
            status=status,
            client=client[0] if client else None,
        )
        try:
            await self.store.record_audit([entry])
        except Exception:
            log.exception(
                "could not write the audit entry of %s",
                entry.action,
                extra={"action": "audit_failed"},
            )


def _template(scope: Scope) -> str:
    route = scope.get("route")
    path: str = getattr(route, "path", None) or scope["path"]
    return path


def _resource(params: dict[str, Any]) -> str | None:
    for name, kind in _KINDS:
        if name in params:
            return f"{kind} {params[name]}"
    return None
