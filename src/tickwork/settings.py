"""Configuration: `TICKWORK_*` environment variables, then an optional `tickwork.toml`.

Command-line flags override both (the CLI passes them as init arguments).
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

DEFAULT_DB_URL = "sqlite:///./.tickwork/tickwork.db"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="TICKWORK_", toml_file="tickwork.toml", extra="forbid"
    )

    database_url: str = Field(DEFAULT_DB_URL, description="sqlite:///PATH or postgresql://...")
    host: str = "127.0.0.1"
    port: int = Field(8787, ge=0, le=65535)
    api_url: str = Field("http://127.0.0.1:8787", description="where CLI commands find the API")
    node_id: str | None = Field(None, description="scheduler/executor identity; default host:pid")
    # scheduler
    claim_batch: int = Field(1000, ge=1, le=10_000)
    lookahead_ms: int = Field(50, ge=0, le=1000, description="claim this early; fire on time")
    max_idle_ms: int = Field(1000, ge=10, description="longest sleep without a wake-up")
    lease_ttl_ms: int = Field(60_000, ge=1000)
    # executor
    executor_concurrency: int = Field(256, ge=1)
    max_body_bytes: int = Field(256 * 1024, ge=1024)
    log_level: str = "info"

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


def sqlite_path(url: str) -> Path | None:
    """The file behind a sqlite:/// URL, or None for other URLs."""
    for prefix in ("sqlite:///", "sqlite+aiosqlite:///"):
        if url.startswith(prefix):
            return Path(url[len(prefix) :])
    return None
