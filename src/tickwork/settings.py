"""Configuration: `TICKWORK_*` environment variables, then an optional `tickwork.toml`.

Command-line flags override both (the CLI passes them as init arguments).
"""

from __future__ import annotations

import ipaddress
import os
import ssl
from pathlib import Path
from typing import Annotated

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from tickwork.errors import InvalidInput
from tickwork.worker.executors.proxy import BadProxy, ProxyRoutes, routes_from
from tickwork.worker.lease_timing import (
    DEFAULT_HEARTBEAT_MS,
    DEFAULT_LEASE_TTL_MS,
    lease_timing_problem,
)

DEFAULT_DB_URL = "sqlite:///./.tickwork/tickwork.db"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="TICKWORK_", toml_file="tickwork.toml", extra="forbid"
    )

    database_url: str = Field(DEFAULT_DB_URL, description="sqlite:///PATH or postgresql://...")
    queue_url: str = Field(
        "", description="empty: the store is the queue; nats://... or redis://... otherwise"
    )
    queue_backstop_ms: int = Field(
        10_000, ge=0, description="with an external queue: when workers take a run from the store"
    )
    host: str = "127.0.0.1"
    port: int = Field(8787, ge=0, le=65535)
    api_url: str = Field("http://127.0.0.1:8787", description="where CLI commands find the API")
    api_key: str | None = Field(
        None, repr=False, description="the key CLI commands send; default: DATA_DIR/admin.key"
    )
    secret_keys: str | None = Field(
        None,
        repr=False,
        description="keys that encrypt stored secrets, <id>:<base64>, comma-separated, the"
        " first one encrypts; default: DATA_DIR/secrets.key, created on first use",
    )
    data_dir: str | None = Field(
        None, description="admin.key and other local state; default: the SQLite file's folder"
    )
    api_key_rate: float = Field(
        200.0,
        ge=0,
        description="requests per second one key may send to one API process; 0: no limit",
    )
    api_key_burst: int = Field(1000, ge=1, description="requests one key may send back to back")
    open_ops: bool = Field(
        False, description="serve /metrics, /docs, /openapi.json without a key to any address"
    )
    node_id: str | None = Field(None, description="scheduler/executor identity; default host:pid")
    # scheduler
    claim_batch: int = Field(1000, ge=1, le=10_000)
    lookahead_ms: int = Field(200, ge=0, le=1000, description="claim this early; fire on time")
    herd_lead_ms: int = Field(
        1200, ge=0, le=10_000, description="claim a herd (more due at once than a batch) this early"
    )
    max_idle_ms: int = Field(1000, ge=10, description="longest sleep without a wake-up")
    backfill_rate: float = Field(
        50,
        gt=0,
        le=100_000,
        description="occurrences per second one scheduler process enqueues for backfills and"
        " catch-ups, all of them together (each backfill also has its own rate)",
    )
    fire_ceiling: float = Field(
        0,
        ge=0,
        le=1_000_000,
        allow_inf_nan=False,
        description="the most occurrences per second the whole cluster fires (each scheduler"
        " paces its claims at its share of the partitions); 0: no ceiling",
    )
    # worker leases (ADR 0016): a dead worker's fires run elsewhere once its leases expire
    lease_ttl_ms: int = Field(
        DEFAULT_LEASE_TTL_MS, ge=1000, description="how long a fire stays leased unrenewed"
    )
    lease_heartbeat_ms: int = Field(
        DEFAULT_HEARTBEAT_MS, ge=100, description="how often a worker renews its fires' leases"
    )
    partition_lease_ttl_ms: int = Field(
        5_000, ge=300, description="a scheduler's lease on its partitions; renewed every third"
    )
    takeover_grace_ms: int = Field(
        500, ge=0, description="any scheduler may claim a job this overdue, whoever holds it"
    )
    # executor (ADR 0023: slots per pool, caps per origin and tenant)
    executor_concurrency: int = Field(
        256, ge=1, description="Python tasks a worker runs at once (sync ones in threads)"
    )
    worker_webhook_concurrency: int = Field(
        512, ge=1, le=65_536, description="webhooks a worker runs at once (awaited sockets)"
    )
    worker_max_per_host: int = Field(
        32, ge=0, description="webhooks a worker runs at once to one origin; 0: no cap"
    )
    worker_tenant_share: float = Field(
        0.5, gt=0, le=1, description="share of each pool's slots one tenant may hold; 1: no cap"
    )
    worker_parked_limit: int = Field(
        1024, ge=0, description="fires held back by a cap that do not count against the backlog"
    )
    worker_unrecorded_limit: int = Field(
        256,
        ge=1,
        description="finished fires whose outcomes a worker holds unwritten at most; a crash"
        " runs at most about this many bodies again",
    )
    # Comma-separated in the environment: TICKWORK_WEBHOOK_ALLOW=127.0.0.1/32,10.1.0.0/16
    webhook_allow: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="networks webhooks may reach despite the SSRF guard, e.g. 127.0.0.1/32",
    )
    webhook_ca_bundle: str | None = Field(
        None,
        description="a PEM file of CA certificates webhooks trust besides the system's store",
    )
    webhook_proxy: SecretStr | None = Field(
        None,
        description="http://[user:pass@]host:port for every webhook, or `direct`; unset: the"
        " HTTPS_PROXY / HTTP_PROXY / NO_PROXY environment",
    )
    webhook_secrets: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="whsec_... signing secrets (two during a rotation); empty: unsigned",
    )
    imports: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="modules with @tickwork.task functions for workers"
    )
    history_retention_days: float = Field(
        30, gt=0, description="attempts and finished runs older than this are deleted"
    )
    metrics_interval_ms: int = Field(
        5_000, ge=10, description="how often schedulers and workers sample the queue depth"
    )
    max_body_bytes: int = Field(256 * 1024, ge=1024)
    log_level: str = "info"

    @field_validator("webhook_allow", "webhook_secrets", "imports", mode="before")
    @classmethod
    def _split_commas(cls, value: object) -> object:
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @field_validator("webhook_allow")
    @classmethod
    def _networks(cls, value: list[str]) -> list[str]:
        for text in value:
            try:
                ipaddress.ip_network(text, strict=False)
            except ValueError:
                raise ValueError(
                    f"{text!r} is not an IP network; write e.g. 127.0.0.1/32"
                ) from None
        return value

    @field_validator("webhook_ca_bundle")
    @classmethod
    def _ca_bundle(cls, value: str | None) -> str | None:
        if not value:
            return None
        try:
            ssl.create_default_context().load_verify_locations(cafile=value)
        except (OSError, ssl.SSLError) as exc:
            raise ValueError(
                f"cannot load {value!r} as PEM CA certificates ({exc}); give the path of a"
                " readable file of -----BEGIN CERTIFICATE----- blocks"
            ) from None
        return value

    @field_validator("webhook_secrets")
    @classmethod
    def _secrets(cls, value: list[str]) -> list[str]:
        from tickwork.webhooks import parse_secret

        for text in value:
            parse_secret(text)  # its ValueError says what is wrong with the secret
        return value

    @model_validator(mode="after")
    def _lease_outlives_missed_heartbeats(self) -> Settings:
        problem = lease_timing_problem(self.lease_ttl_ms, self.lease_heartbeat_ms)
        if problem is not None:
            raise ValueError(
                f"lease_ttl_ms, lease_heartbeat_ms: {problem}; raise TICKWORK_LEASE_TTL_MS "
                "or lower TICKWORK_LEASE_HEARTBEAT_MS"
            )
        return self

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, env_settings, TomlConfigSettingsSource(settings_cls))


def data_dir(settings: Settings) -> Path:
    """Where local state lives (admin.key): TICKWORK_DATA_DIR, else the SQLite database's
    folder, else ./.tickwork."""
    if settings.data_dir:
        return Path(settings.data_dir)
    path = sqlite_path(settings.database_url)
    return path.parent if path is not None else Path(".tickwork")


def sqlite_path(url: str) -> Path | None:
    """The file behind a sqlite:/// URL, or None for other URLs."""
    for prefix in ("sqlite:///", "sqlite+aiosqlite:///"):
        if url.startswith(prefix):
            return Path(url[len(prefix) :])
    return None


def webhook_proxies(settings: Settings) -> ProxyRoutes:
    """The outbound proxy of each webhook target: the `webhook_proxy` setting, else the
    process's HTTPS_PROXY / HTTP_PROXY / NO_PROXY (worker/executors/proxy.py). Raises
    InvalidInput naming the setting or variable that is malformed (never its value: a proxy
    URL may hold a password, which is why the setting is not checked with the others)."""
    setting = settings.webhook_proxy
    try:
        return routes_from(None if setting is None else setting.get_secret_value(), os.environ)
    except BadProxy as exc:
        raise InvalidInput(exc.source, exc.detail) from None
