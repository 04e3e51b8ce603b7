"""`tickwork tenants <verb>`: tenants (create, update, list, show, delete; admin keys), their
limits (`--max-jobs` and the others, on create and update), webhook signing secrets (`tenants
secrets <verb>`) and destination lists (`tenants egress <verb>`), through the API.

The secrets are write-only: `set` sends them, and every answer shows only their fingerprints,
except a secret tickwork generates (`tenants create`, `tenants secrets rotate`), printed once.
"""

from __future__ import annotations

from typing import Annotated, Any
from urllib.parse import quote

import typer
from rich.table import Table

from tickwork.cli.app import (
    CliFailure,
    stdout_console,
    tenant_egress_app,
    tenant_secrets_app,
    tenants_app,
)
from tickwork.cli.client import api_client
from tickwork.cli.options import ApiOpt, JsonOpt, SecretOpt
from tickwork.cli.render import print_json, show, tenant_signing
from tickwork.domain.tenant_limits import LIMIT_FIELDS

__all__ = [
    "tenant_egress_clear",
    "tenant_egress_set",
    "tenant_egress_show",
    "tenant_secrets_clear",
    "tenant_secrets_retire",
    "tenant_secrets_rotate",
    "tenant_secrets_set",
    "tenant_secrets_show",
    "tenants_create",
    "tenants_delete",
    "tenants_list",
    "tenants_show",
    "tenants_update",
]

TenantArg = Annotated[str, typer.Argument(help="the tenant", show_default=False)]


def _tenant_secrets_path(tenant: str) -> str:
    return f"/v1/tenants/{quote(tenant, safe='')}/webhook-secrets"


@tenant_secrets_app.command("set")
def tenant_secrets_set(
    tenant: TenantArg, secret: SecretOpt = None, api: ApiOpt = None, as_json: JsonOpt = False
) -> None:
    """Sign the tenant's jobs that have no secrets of their own with these (1 or 2)."""
    if not secret:
        raise CliFailure("give --secret whsec_... (twice during a rotation)")
    answer = api_client(api).call("PUT", _tenant_secrets_path(tenant), json={"secrets": secret})
    show(answer, as_json, tenant_signing)


@tenant_secrets_app.command("show")
def tenant_secrets_show(tenant: TenantArg, api: ApiOpt = None, as_json: JsonOpt = False) -> None:
    """Show the fingerprints of the tenant's secrets (never the secrets)."""
    show(api_client(api).call("GET", _tenant_secrets_path(tenant)), as_json, tenant_signing)


@tenant_secrets_app.command("rotate")
def tenant_secrets_rotate(tenant: TenantArg, api: ApiOpt = None, as_json: JsonOpt = False) -> None:
    """Generate a new secret (printed once); it and the previous one both sign until `retire`."""
    answer = api_client(api).call("POST", _tenant_secrets_path(tenant) + "/rotate")
    show(answer, as_json, lambda a: _with_secret(tenant_signing(a), a["secret"]))


@tenant_secrets_app.command("retire")
def tenant_secrets_retire(tenant: TenantArg, api: ApiOpt = None, as_json: JsonOpt = False) -> None:
    """End a rotation: sign with the newest secret only."""
    answer = api_client(api).call("DELETE", _tenant_secrets_path(tenant) + "/previous")
    show(answer, as_json, tenant_signing)


def _with_secret(table: Table, secret: str) -> Table:
    table.caption = f"new secret (shown once, store it now): {secret}"
    return table


@tenant_secrets_app.command("clear")
def tenant_secrets_clear(tenant: TenantArg, api: ApiOpt = None, as_json: JsonOpt = False) -> None:
    """Remove the tenant's secrets (with --json: prints nothing)."""
    api_client(api).call("DELETE", _tenant_secrets_path(tenant))
    if not as_json:
        stdout_console().print(f"cleared the webhook secrets of tenant {tenant}", markup=False)


def _tenant_path(tenant: str) -> str:
    return f"/v1/tenants/{quote(tenant, safe='')}"


def _tenants_table(tenants: list[dict[str, Any]]) -> Table:
    table = Table("tenant", "created", "allow", "deny", "jobs", "limits")
    for t in tenants:
        egress = t.get("egress") or {}
        allow = ", ".join(egress.get("allow", [])) or "any public host"
        deny = ", ".join(egress.get("deny", [])) or "-"
        limits = t.get("limits") or {}
        table.add_row(t["name"], t["created_at"], allow, deny, _jobs(t, limits), _limits(limits))
    return table


def _jobs(tenant: dict[str, Any], limits: dict[str, Any]) -> str:
    """The tenant's jobs, against its quota: `3 of 10`, or `3` without one."""
    jobs = str((tenant.get("usage") or {}).get("jobs", 0))
    quota = limits.get("max_jobs")
    return jobs if quota is None else f"{jobs} of {quota}"


def _limits(limits: dict[str, Any]) -> str:
    """The limits set other than max_jobs (shown beside the jobs), as `name=value`."""
    shown = [
        f"{name}={value:g}"
        for name in LIMIT_FIELDS
        if name != "max_jobs" and (value := limits.get(name)) is not None
    ]
    return ", ".join(shown) or "-"


MaxJobsOpt = Annotated[
    int | None,
    typer.Option(
        "--max-jobs",
        help="the most jobs the tenant may have, in every state (completed ones count)",
        show_default=False,
    ),
]
MaxFiresOpt = Annotated[
    float | None,
    typer.Option(
        "--max-fires-per-s",
        help="fires per second of its jobs (its fires are paced at it; others are not held back)",
        show_default=False,
    ),
]
MaxRunsOpt = Annotated[
    int | None,
    typer.Option(
        "--max-concurrent-runs",
        help="the most of its runs running at once across the cluster (the others wait)",
        show_default=False,
    ),
]
MaxApiRpsOpt = Annotated[
    float | None,
    typer.Option(
        "--max-api-rps",
        help="API requests per second by its keys, per API process",
        show_default=False,
    ),
]
WeightOpt = Annotated[
    int | None,
    typer.Option(
        "--weight",
        help="its share under overload, default 1 (a scheduler that is behind shares by it)",
        show_default=False,
    ),
]
RemoveOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--remove",
        help=f"remove a limit ({', '.join(n.replace('_', '-') for n in LIMIT_FIELDS)});"
        " repeat for more",
        show_default=False,
    ),
]


def _given_limits(
    max_jobs: int | None,
    max_fires_per_s: float | None,
    max_concurrent_runs: int | None,
    max_api_rps: float | None,
    weight: int | None,
) -> dict[str, int | float]:
    """The limits given on the command line (the API checks their ranges)."""
    given = {
        "max_jobs": max_jobs,
        "max_fires_per_s": max_fires_per_s,
        "max_concurrent_runs": max_concurrent_runs,
        "max_api_rps": max_api_rps,
        "weight": weight,
    }
    return {name: value for name, value in given.items() if value is not None}


def _removed(names: list[str]) -> dict[str, None]:
    removed: dict[str, None] = {}
    for given in names:
        name = given.strip().removeprefix("--").replace("-", "_")
        if name not in LIMIT_FIELDS:
            known = ", ".join(n.replace("_", "-") for n in LIMIT_FIELDS)
            raise CliFailure(f"--remove {given}: not a limit; the limits are: {known}")
        removed[name] = None
    return removed


AllowOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--allow",
        help="a host pattern the tenant's webhooks may reach (api.partner.io, *.example.com,"
        " 203.0.113.0/24); repeat for more; none: any public host",
    ),
]
DenyOpt = Annotated[
    list[str] | None,
    typer.Option("--deny", help="a host pattern they may never reach (wins over --allow)"),
]


@tenant_egress_app.command("set")
def tenant_egress_set(
    tenant: TenantArg,
    allow: AllowOpt = None,
    deny: DenyOpt = None,
    api: ApiOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Replace the tenant's lists with these (both lists, whole)."""
    if not allow and not deny:
        raise CliFailure("give --allow and/or --deny patterns; to remove the lists, use clear")
    body = {"egress": {"allow": allow or [], "deny": deny or []}}
    answer = api_client(api).call("PATCH", _tenant_path(tenant), json=body)
    show(answer, as_json, lambda t: _tenants_table([t]))


@tenant_egress_app.command("show")
def tenant_egress_show(tenant: TenantArg, api: ApiOpt = None, as_json: JsonOpt = False) -> None:
    """Show the tenant's lists."""
    show(api_client(api).call("GET", _tenant_path(tenant)), as_json, lambda t: _tenants_table([t]))


@tenant_egress_app.command("clear")
def tenant_egress_clear(tenant: TenantArg, api: ApiOpt = None, as_json: JsonOpt = False) -> None:
    """Remove the tenant's lists: its webhooks may reach any host the SSRF guard permits."""
    answer = api_client(api).call("PATCH", _tenant_path(tenant), json={"egress": None})
    show(answer, as_json, lambda t: _tenants_table([t]))


@tenants_app.command("create")
def tenants_create(
    tenant: TenantArg,
    max_jobs: MaxJobsOpt = None,
    max_fires_per_s: MaxFiresOpt = None,
    max_concurrent_runs: MaxRunsOpt = None,
    max_api_rps: MaxApiRpsOpt = None,
    weight: WeightOpt = None,
    api: ApiOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Create a tenant (an admin key), with the limits given (none: no limits); prints its
    generated webhook signing secret once."""
    limits = _given_limits(max_jobs, max_fires_per_s, max_concurrent_runs, max_api_rps, weight)
    body: dict[str, Any] = {"name": tenant}
    if limits:
        body["limits"] = limits
    answer = api_client(api).call("POST", "/v1/tenants", json=body)
    show(answer, as_json, lambda t: _with_secret(_tenants_table([t]), t["webhook_secret"]))


@tenants_app.command("update")
def tenants_update(
    tenant: TenantArg,
    max_jobs: MaxJobsOpt = None,
    max_fires_per_s: MaxFiresOpt = None,
    max_concurrent_runs: MaxRunsOpt = None,
    max_api_rps: MaxApiRpsOpt = None,
    weight: WeightOpt = None,
    remove: RemoveOpt = None,
    api: ApiOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Change the tenant's limits given (an admin key); the others stay. --remove NAME
    removes one."""
    limits: dict[str, int | float | None] = {**_removed(remove or [])}
    given = _given_limits(max_jobs, max_fires_per_s, max_concurrent_runs, max_api_rps, weight)
    clash = sorted(set(limits) & set(given))
    if clash:
        raise CliFailure(f"--{clash[0].replace('_', '-')} is both given and removed: pick one")
    limits.update(given)
    if not limits:
        raise CliFailure(
            "give a limit to change (--max-jobs N, --max-api-rps R, ...) or --remove NAME"
        )
    answer = api_client(api).call("PATCH", _tenant_path(tenant), json={"limits": limits})
    show(answer, as_json, lambda t: _tenants_table([t]))


@tenants_app.command("list")
def tenants_list(api: ApiOpt = None, as_json: JsonOpt = False) -> None:
    """Every tenant (a tenant key sees its own)."""
    answer = api_client(api).call("GET", "/v1/tenants")
    show(answer, as_json, lambda a: _tenants_table(a["tenants"]))


@tenants_app.command("show")
def tenants_show(tenant: TenantArg, api: ApiOpt = None, as_json: JsonOpt = False) -> None:
    """One tenant: its lists, limits and jobs."""
    show(api_client(api).call("GET", _tenant_path(tenant)), as_json, lambda t: _tenants_table([t]))


@tenants_app.command("delete")
def tenants_delete(tenant: TenantArg, api: ApiOpt = None, as_json: JsonOpt = False) -> None:
    """Delete a tenant without jobs and revoke its keys (an admin key)."""
    api_client(api).call("DELETE", _tenant_path(tenant))
    if as_json:
        print_json({"deleted": tenant})
    else:
        stdout_console().print(f"deleted tenant {tenant} and revoked its keys", markup=False)
