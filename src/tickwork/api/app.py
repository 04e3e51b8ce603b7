"""The API application factory.

`create_app` wires routes, error handlers and the body-size guard around an already-built
store and clock. It does not open or close the store: whoever runs the process (the runtime,
or a test) owns the store's life and may add its own lifespan and routes to the app.
"""

from __future__ import annotations

from fastapi import Depends, FastAPI

from tickwork import __doc__ as _package_doc
from tickwork.api.access import router as access_routes
from tickwork.api.audit import AuditTrail
from tickwork.api.auth import admin, caller
from tickwork.api.backfills import router as backfill_routes
from tickwork.api.cluster import router as cluster_routes
from tickwork.api.errors import install_error_handlers
from tickwork.api.middleware import EdgeMiddleware
from tickwork.api.ops_guard import OpsGuard
from tickwork.api.routes import ApiContext, clean_parameters, ops, v1
from tickwork.clock import Clock
from tickwork.services.backfills import BackfillService
from tickwork.services.cluster import ClusterService
from tickwork.services.dead_letters import DeadLetterService
from tickwork.services.jobs import JobService
from tickwork.services.keys import KeyService
from tickwork.services.tenant_rates import TenantRates
from tickwork.services.tenants import TenantService
from tickwork.settings import Settings
from tickwork.store.base import ScheduleStore
from tickwork.timing.rate_limit import Limit
from tickwork.version import tickwork_version
from tickwork.worker.executors.ssrf import AddressPolicy

API_DESCRIPTION = f"""{_package_doc}

Every error response has the shape
`{{"error": {{"code": str, "message": str, "field": str|null}}}}`.
Timestamps are ISO-8601; responses give them in UTC with a trailing `Z`.
Bodies are strict JSON (UTF-8; no NaN or Infinity; no key twice; integers of at most 1000
digits), and no text, in a body or a parameter, may contain NUL (U+0000) or a lone surrogate.
Rules this schema cannot state are refused with codes of their own (docs/api.md, "Errors")."""


def create_app(*, store: ScheduleStore, clock: Clock, settings: Settings) -> FastAPI:
    """The API's HTTP app (a scheduler or worker process alone serves api/ops_app.py's)."""
    app = FastAPI(
        title="tickwork",
        version=tickwork_version(),
        description=API_DESCRIPTION,
        openapi_url="/openapi.json",
        docs_url="/docs",
        redoc_url=None,
    )
    # A tenant's request rate, from a short cache of its limits; a change made through this
    # process reaches it at once.
    app.state.tenant_rates = tenant_rates = TenantRates(store, clock)
    app.state.tickwork = ApiContext(
        jobs=JobService(store, clock),
        dead_letters=DeadLetterService(store, clock),
        tenants=TenantService(store, clock, on_limits_changed=tenant_rates.forget),
        store=store,
        clock=clock,
        egress=AddressPolicy(allow=settings.webhook_allow),
    )
    app.state.cluster = ClusterService(store, clock)
    app.state.backfills = BackfillService(store, clock)
    limit = Limit(rate=settings.api_key_rate, burst=settings.api_key_burst)
    app.state.keys = keys = KeyService(store, clock, limit=limit)
    install_error_handlers(app)
    app.include_router(v1)
    app.include_router(access_routes, dependencies=[Depends(caller), Depends(clean_parameters)])
    app.include_router(
        backfill_routes, prefix="/v1", dependencies=[Depends(caller), Depends(clean_parameters)]
    )
    app.include_router(cluster_routes, prefix="/v1", dependencies=[Depends(admin)])
    app.include_router(ops)
    app.add_middleware(AuditTrail, store=store, clock=clock)
    app.add_middleware(OpsGuard, keys=keys, open_ops=settings.open_ops)
    app.add_middleware(EdgeMiddleware, max_body_bytes=settings.max_body_bytes)
    return app
