"""Request and response models of the HTTP API, and their translation to domain records.

The models check shape only (types, lengths, unknown fields, URL scheme); the rules that need
the time math (cron syntax, time zones, whether a schedule ever fires) live in the job service
and `tickwork.timing`, which raise `InvalidInput` with the same dotted field names.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    JsonValue,
    SerializerFunctionWrapHandler,
    WithJsonSchema,
    field_validator,
    model_serializer,
    model_validator,
)
from pydantic_core import PydanticCustomError

from tickwork.clock import utc_iso
from tickwork.domain.jobs import (
    DEFAULT_CATCHUP_WINDOW_MS,
    DEFAULT_MISFIRE_GRACE_MS,
    DEFAULT_PRIORITY,
    MAX_PRIORITY,
    MIN_PRIORITY,
    AlertTarget,
    AtTrigger,
    CronTrigger,
    DstGap,
    DstRepeat,
    EveryTrigger,
    Job,
    JobState,
    MisfirePolicy,
    OverlapPolicy,
    Schedule,
    TaskTarget,
    Trigger,
    WebhookTarget,
)
from tickwork.domain.masking import MASK, mask_headers, mask_url
from tickwork.domain.retry import RetryPolicy
from tickwork.domain.runs import (
    AttemptRecord,
    AttemptStatus,
    Run,
    RunOrigin,
    RunState,
    RunStatus,
    run_state,
)
from tickwork.errors import InvalidInput
from tickwork.services.jobs import KEEP, JobPatch, JobSpec, Keep, RunDetail, ScheduleChange
from tickwork.services.rules import (
    ANCHOR_AT_ACCEPT,
    MAX_ATTEMPTS,
    MAX_HEADER_NAME_CHARS,
    MAX_HEADER_VALUE_CHARS,
    MAX_HEADERS,
    MAX_MULTIPLIER,
    MAX_NAME_CHARS,
    MAX_NOTE_CHARS,
    MAX_RUNS,
    MAX_TENANT_CHARS,
    MAX_URL_CHARS,
    check_secrets,
    check_webhook_url,
    retry_policy,
)
from tickwork.services.tenants import NewSecret, TenantSigning
from tickwork.timing.cron import TIMEZONE_FIELD, ZONE_NAMES, load_zone
from tickwork.timing.durations import format_duration_ms, parse_duration_ms
from tickwork.timing.preview import EndReason, SchedulePreview
from tickwork.timing.shift import known_planned, nominal_of, shift_note
from tickwork.timing.triggers import parse_catchup_window_ms, parse_shift_ms
from tickwork.webhooks import MAX_SIGNING_SECRETS, fingerprint

DEFAULT_TIMEOUT = "PT10S"
HEADER_NAME_PATTERN = r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$"  # an RFC 9110 token
_HEADER_NAME = re.compile(HEADER_NAME_PATTERN)
# No control character but TAB: no CR/LF injection (JSON Schema and Python read it alike).
HEADER_VALUE_PATTERN = "^[^\\x00-\\x08\\x0a-\\x1f\\x7f]*$"
NOT_BLANK = "\\S"  # has a character that is not white space (a search, not a full match)
# `webhooks.parse_secret`: whsec_ (optional) and the base64 of 24 or more bytes, white space
# around it ignored.
SECRET_PATTERN = (
    "^\\s*(whsec_)?(?:[A-Za-z0-9+/]{4}){8,}(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?\\s*$"
)


def documented(**keywords: Any) -> dict[str, Any]:
    """JSON Schema keywords for a rule the API enforces in its own code, with its own messages
    (a pydantic `pattern` would answer "String should match pattern '...'"): the schema shows
    the rule, the code keeps the message. tests/integration/test_api_schemathesis.py checks
    that both agree."""
    return {"json_schema_extra": keywords}


def _duration_shape(value: Any) -> Any:
    # bool is an int subclass; `"every": true` is a mistake, not one second
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ValueError('give a duration as ISO-8601 text like "PT30S" or a number of seconds')
    return value


Duration = Annotated[
    str | int | float,
    BeforeValidator(_duration_shape),
    Field(examples=["PT30S", 30]),
]
# Instants far from now are mistakes, and near datetime's limits they overflow date math.
EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
LATEST = datetime(2200, 1, 1, tzinfo=UTC)


def _in_range(when: datetime) -> datetime:
    try:
        utc = when.astimezone(UTC)
    except OverflowError:
        utc = EARLIEST - timedelta(days=1)  # year 1 or 9999 with an offset: far out of range
    if not EARLIEST <= utc < LATEST:
        raise PydanticCustomError(
            "invalid_instant", f"give an instant from {EARLIEST.year} to {LATEST.year - 1}"
        )
    return utc


Instant = Annotated[
    AwareDatetime, AfterValidator(_in_range), Field(examples=["2026-12-24T18:00:00Z"])
]
_DATE_TIME_TEXT = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ]")


def _date_time_text(value: Any) -> Any:
    # A query parameter is text, and pydantic reads text such as "0.5" as seconds since 1970;
    # the schema says date-time, so only a date-time is one.
    if isinstance(value, str) and not _DATE_TIME_TEXT.match(value):
        raise ValueError("give an ISO-8601 date-time with an offset, e.g. 2026-12-24T18:00:00Z")
    return value


QueryInstant = Annotated[Instant, BeforeValidator(_date_time_text)]
# Run ids are 64-bit in the SQL stores; a larger number is refused here, not overflowed there.
MAX_RUN_ID = 2**63 - 1
InstantOut = Annotated[str, Field(json_schema_extra={"format": "date-time"})]


class _Input(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Output(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _whole(value: Any) -> Any:
    # JSON Schema's integer includes 5.0 (a number with no fraction); strict ints refuse the
    # rest of what pydantic would coerce: true, "5", 5.5.
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


WholeNumber = Annotated[int, BeforeValidator(_whole), Field(strict=True)]


# -- requests ---------------------------------------------------------------------------------


def _one_schedule_kind(schema: dict[str, Any]) -> None:
    """Exactly one of cron, every or at (null counts as absent), with timezone and dst only
    beside cron and anchor only beside every: what `ScheduleIn._one_kind` enforces."""
    only = {"cron": ("timezone", "dst"), "every": ("anchor",), "at": ()}
    variants = []
    for kind, companions in only.items():
        others = [k for k in ("cron", "every", "at", "timezone", "anchor", "dst") if k != kind]
        nulls = {k: {"type": "null"} for k in others if k not in companions}
        variants.append(
            {"required": [kind], "properties": {kind: {"not": {"type": "null"}}, **nulls}}
        )
    schema["oneOf"] = variants


def _at_most_one_schedule_kind(schema: dict[str, Any]) -> None:
    """A PATCH's schedule: as `_one_schedule_kind`, or none of cron, every and at (then any
    option goes): what `ScheduleUpdate._one_kind` enforces."""
    _one_schedule_kind(schema)
    none = {"properties": {k: {"type": "null"} for k in ("cron", "every", "at")}}
    schema["oneOf"].insert(0, none)


ZoneName = Annotated[
    str,
    Field(
        max_length=100,
        description="an IANA time zone name, e.g. Europe/Berlin",
        examples=["Europe/Berlin", "UTC"],
        **documented(enum=ZONE_NAMES),
    ),
]


def check_zone(name: str, field: str = TIMEZONE_FIELD) -> str:
    """The zone, if it is one the schema lists (ZONE_NAMES); InvalidInput naming `field`."""
    if name not in _ZONES:
        load_zone(name)  # says what is wrong and suggests a name ...
        raise InvalidInput(  # ... or it is a file the zone database has but lists no zone for
            field,
            f"{name!r} is not a time zone name; use an IANA name such as 'Europe/Berlin'",
            code="unknown_timezone",
        )
    return name


_ZONES = frozenset(ZONE_NAMES)


class DstIn(_Input):
    """A cron schedule's choices for clock-change days (docs/cron-and-dst.md)."""

    gap: DstGap | None = Field(
        None, description="a wall time that does not exist (spring forward); default: cron"
    )
    repeat: DstRepeat | None = Field(
        None, description="a wall time that happens twice (fall back); default: cron"
    )


def _misfire_alias(value: Any) -> Any:
    return MisfirePolicy.FIRE_ALL.value if value == "all" else value


Misfire = Annotated[
    MisfirePolicy,
    BeforeValidator(_misfire_alias),
    Field(description="coalesce (default), skip, or fire_all (also spelled all)"),
]


class ScheduleIn(_Input):
    """Exactly one of `cron`, `every`, `at`, plus the options common to all three."""

    model_config = ConfigDict(json_schema_extra=_one_schedule_kind)

    cron: str | None = Field(
        None, min_length=1, max_length=200, examples=["0 2 * * *"], **documented(pattern=NOT_BLANK)
    )
    timezone: ZoneName | None = Field(None, description="IANA zone; cron only")
    every: Duration | None = None
    anchor: Instant | None = Field(None, description="every only; default: when accepted")
    at: Instant | None = None
    start_at: Instant | None = None
    end_at: Instant | None = None
    misfire: Misfire | None = None
    misfire_grace: Duration | None = None
    catchup_window: Duration | None = Field(
        None,
        description="misfire fire_all only (unused otherwise): how far back missed occurrences"
        " are caught up, paced; older ones are skipped. PT1S to P366D; default P1D",
    )
    dst: DstIn | None = Field(None, description="cron only: clock-change choices")
    jitter: Duration | None = Field(
        None,
        description="delay each fire by an amount in [0, jitter] drawn from the occurrence (the"
        " same on every scheduler), to spread a herd; up to P1D; not with window",
        examples=["PT30S"],
    )
    window: Duration | None = Field(
        None,
        description="let each occurrence fire anywhere in [its instant, + window): tickwork"
        " places it in the least loaded second; up to P1D; not with jitter",
        examples=["PT5M"],
    )

    @model_validator(mode="after")
    def _one_kind(self) -> ScheduleIn:
        given = [k for k in ("cron", "every", "at") if getattr(self, k) is not None]
        if len(given) != 1:
            found = " and ".join(given) if given else "none of them"
            raise ValueError(f"give exactly one of cron, every or at (found {found})")
        self._kind_options()
        return self

    def _kind_options(self) -> None:
        if self.timezone is not None and self.cron is None:
            raise ValueError("timezone applies to cron schedules only; remove it")
        if self.anchor is not None and self.every is None:
            raise ValueError("anchor applies to every schedules only; remove it")
        if self.dst is not None and self.cron is None:
            raise ValueError("dst applies to cron schedules only; remove it")

    def to_domain(self) -> Schedule:
        return self._options(Schedule(trigger=self._trigger(parse_duration_ms)))

    def _options(self, schedule: Schedule, given: frozenset[str] | None = None) -> Schedule:
        """`schedule` with the options this input sets: all of them (`given` None, a new
        schedule), or only those in `given` (a PATCH keeps what it does not name)."""
        fields = set(type(self).model_fields) if given is None else given
        changes: dict[str, Any] = {}
        for name in ("start_at", "end_at"):
            if name in fields:
                changes[name] = getattr(self, name)
        if "misfire" in fields:
            changes["misfire"] = self.misfire or MisfirePolicy.COALESCE
        if "misfire_grace" in fields:
            changes["misfire_grace_ms"] = (
                DEFAULT_MISFIRE_GRACE_MS
                if self.misfire_grace is None
                else parse_duration_ms(self.misfire_grace, field="schedule.misfire_grace")
            )
        if "catchup_window" in fields:
            changes["catchup_window_ms"] = (
                DEFAULT_CATCHUP_WINDOW_MS
                if self.catchup_window is None
                else parse_catchup_window_ms(self.catchup_window)
            )
        for name in ("jitter", "window"):
            if name in fields:
                value = getattr(self, name)
                shift = 0 if value is None else parse_shift_ms(value, f"schedule.{name}")
                changes[f"{name}_ms"] = shift
        if "dst" in fields:
            dst = self.dst or DstIn()
            changes["dst_gap"] = dst.gap or DstGap.CRON
            changes["dst_repeat"] = dst.repeat or DstRepeat.CRON
        return replace(schedule, **changes)

    def _trigger(self, parse_ms: Callable[..., int]) -> Trigger:
        if self.cron is not None:
            zone = "UTC" if self.timezone is None else check_zone(self.timezone)
            return CronTrigger(expr=self.cron, timezone=zone)
        if self.every is not None:
            interval_ms = parse_ms(self.every, field="schedule.every")
            return EveryTrigger(interval_ms=interval_ms, anchor=self.anchor or ANCHOR_AT_ACCEPT)
        assert self.at is not None  # _one_kind guarantees it
        return AtTrigger(at=self.at)


class ScheduleUpdate(ScheduleIn):
    """A PATCH's schedule: only what it names changes. A trigger of the job's own kind keeps
    the kind's options it does not name (a new cron expression keeps the job's time zone); a
    trigger of another kind starts from that kind's defaults; no trigger at all keeps the
    job's, with the options given (a time zone alone moves a cron job to that zone)."""

    model_config = ConfigDict(json_schema_extra=_at_most_one_schedule_kind)

    @model_validator(mode="after")
    def _one_kind(self) -> ScheduleUpdate:
        given = [k for k in ("cron", "every", "at") if getattr(self, k) is not None]
        if len(given) > 1:
            raise ValueError(f"give at most one of cron, every or at (found {' and '.join(given)})")
        if given:
            self._kind_options()
        return self

    def apply(self, old: Schedule) -> Schedule:
        """The job's schedule `old` with this edit applied (InvalidInput if it cannot be)."""
        return self._options(
            replace(old, trigger=self._patched_trigger(old.trigger)),
            frozenset(self.model_fields_set),
        )

    def _patched_trigger(self, old: Trigger) -> Trigger:
        if self.cron is not None:
            zone = self.timezone
            if zone is None:
                zone = old.timezone if isinstance(old, CronTrigger) else "UTC"
            return CronTrigger(expr=self.cron, timezone=check_zone(zone))
        if self.every is not None:
            anchor = self.anchor
            if anchor is None:
                anchor = old.anchor if isinstance(old, EveryTrigger) else ANCHOR_AT_ACCEPT
            interval_ms = parse_duration_ms(self.every, field="schedule.every")
            return EveryTrigger(interval_ms=interval_ms, anchor=anchor)
        if self.at is not None:
            return AtTrigger(at=self.at)
        return self._options_of_kept(old)

    def _options_of_kept(self, old: Trigger) -> Trigger:
        for name, kind, field in (
            ("timezone", CronTrigger, "cron"),
            ("anchor", EveryTrigger, "every"),
            ("dst", CronTrigger, "cron"),
        ):
            if getattr(self, name) is not None and not isinstance(old, kind):
                raise InvalidInput(
                    f"schedule.{name}",
                    f"{name} applies to {field} schedules only, and this job's schedule is not"
                    f" one; give a new {field} schedule with it, or remove it",
                )
        if isinstance(old, CronTrigger) and self.timezone is not None:
            return replace(old, timezone=check_zone(self.timezone))
        if isinstance(old, EveryTrigger) and self.anchor is not None:
            return replace(old, anchor=self.anchor)
        return old


def _checked_url(url: str) -> None:
    try:
        check_webhook_url(url)
    except ValueError as exc:
        raise PydanticCustomError("invalid_url", str(exc)) from None


# The shape of an http(s) URL with a host; `check_webhook_url` has the rest (a port in range,
# brackets around an IPv6 address) and the messages.
URL_PATTERN = "^[Hh][Tt][Tt][Pp][Ss]?://[^\\s/?#]+([/?#]\\S*)?$"
# Error types whose name is the API's error code (the rest are "invalid"): rules the schema
# states only in part.
CODED_ERRORS = frozenset({"invalid_url", "invalid_instant"})


def _header_syntax(headers: dict[str, str]) -> dict[str, str]:
    if len(headers) > MAX_HEADERS:
        raise ValueError(f"give at most {MAX_HEADERS} headers, got {len(headers)}")
    for name, value in headers.items():
        if not _HEADER_NAME.fullmatch(name):
            raise ValueError(f"header name {name[:60]!r} is not a valid HTTP token")
        if len(name) > MAX_HEADER_NAME_CHARS:
            raise ValueError(
                f"header name {name[:60]!r}... is longer than {MAX_HEADER_NAME_CHARS} characters"
            )
        if any((ord(ch) < 0x20 and ch != "\t") or ord(ch) == 0x7F for ch in value):
            raise ValueError(f"header {name!r} has a control character (CR, LF, ...)")
        if len(value) > MAX_HEADER_VALUE_CHARS:
            raise ValueError(
                f"header {name!r} has a value longer than {MAX_HEADER_VALUE_CHARS} characters"
            )
    return headers


Headers = Annotated[
    dict[str, str],
    AfterValidator(_header_syntax),
    # Written out: pydantic would describe max_length on a dict as maxLength (a string keyword).
    WithJsonSchema(
        {
            "type": "object",
            "maxProperties": MAX_HEADERS,
            "propertyNames": {
                "minLength": 1,
                "maxLength": MAX_HEADER_NAME_CHARS,
                "pattern": HEADER_NAME_PATTERN,
            },
            "additionalProperties": {
                "type": "string",
                "maxLength": MAX_HEADER_VALUE_CHARS,
                "pattern": HEADER_VALUE_PATTERN,
            },
        }
    ),
]
# Write-only: accepted here, never part of a response. Checked by `check_secrets` (which never
# repeats a secret in its errors) rather than by validators whose messages could.
Secret = Annotated[str, Field(max_length=200, **documented(pattern=SECRET_PATTERN))]
Secrets = Annotated[
    list[Secret],
    Field(
        max_length=10,  # a bound on the work; `check_secrets` refuses more than 2 in its words
        description="1 or 2 whsec_... signing secrets (2 during a rotation); write-only",
        **documented(maxItems=MAX_SIGNING_SECRETS),
    ),
]


_WEBHOOK_ONLY = ("url", "method", "headers", "body", "secrets", "signed")
_TASK_ONLY = ("name", "args")


def _one_target_type(schema: dict[str, Any]) -> None:
    """A webhook (type absent or "webhook") with a url and none of the task's fields, or a task
    (type "task") with a name and none of the webhook's: what `TargetIn.to_domain` enforces."""
    schema["oneOf"] = [
        {
            "properties": {"type": {"const": "webhook"}, "url": {"type": "string"}},
            "required": ["url"],
            "not": {"anyOf": [{"required": [f]} for f in _TASK_ONLY]},
        },
        {
            "properties": {"type": {"const": "task"}, "name": {"type": "string"}},
            "required": ["type", "name"],
            "not": {"anyOf": [{"required": [f]} for f in _WEBHOOK_ONLY]},
        },
    ]


class TargetIn(_Input):
    """A webhook (`type` "webhook": url, method, headers, body, secrets) or a Python task
    registered in the workers (`type` "task": name, args). `timeout` applies to both."""

    model_config = ConfigDict(json_schema_extra=_one_target_type)

    type: Literal["webhook", "task"] = "webhook"
    url: str | None = Field(
        None,
        max_length=MAX_URL_CHARS,
        examples=["https://example.com/hook"],
        **documented(pattern=URL_PATTERN),
    )
    method: Literal["GET", "POST", "PUT", "PATCH", "DELETE"] = "POST"
    headers: Headers = Field(default_factory=dict)
    body: JsonValue = None
    secrets: Secrets | None = None
    signed: bool = Field(
        True,
        strict=True,
        description="false: send this job's requests unsigned even when its tenant or the"
        " workers have signing secrets (an explicit opt-out of signed-by-default)",
    )
    name: str | None = Field(
        None,
        min_length=1,
        max_length=MAX_NAME_CHARS,
        description="task: its registered name",
        **documented(pattern=NOT_BLANK),
    )
    args: JsonValue = Field(None, description="task: a JSON value passed as ctx.args")
    timeout: Duration | None = Field(
        None, description="webhook: default PT10S, at most PT5M; task: default PT1M, at most PT1H"
    )

    @field_validator("url")
    @classmethod
    def _http_url(cls, url: str | None) -> str | None:
        if url is not None:
            _checked_url(url)
        return url

    @field_validator("method", mode="before")
    @classmethod
    def _upper(cls, method: Any) -> Any:
        return method.upper() if isinstance(method, str) else method

    def to_domain(self) -> WebhookTarget | TaskTarget:
        if self.type == "task":
            return self._task()
        for field in _TASK_ONLY:
            if field in self.model_fields_set:
                raise InvalidInput(f"target.{field}", 'only a "task" target takes it')
        if self.url is None:
            raise InvalidInput("target.url", "a webhook target needs a url", code="missing")
        timeout_ms = parse_duration_ms(self.timeout or DEFAULT_TIMEOUT, field="target.timeout")
        return WebhookTarget(
            url=self.url,
            method=self.method,
            headers=dict(self.headers),
            body=self.body,
            timeout_s=timeout_ms / 1000,
            secrets=check_secrets("target.secrets", self.secrets or ()),
            signed=self.signed,
        )

    def secrets_patch(self) -> tuple[str, ...] | Literal[Keep.KEEP]:
        """For an edit: the secrets if the request names them (null and [] clear), else KEEP."""
        if "secrets" not in self.model_fields_set:
            return KEEP
        return check_secrets("target.secrets", self.secrets or ())

    def _task(self) -> TaskTarget:
        for field in _WEBHOOK_ONLY:
            if field in self.model_fields_set:
                raise InvalidInput(f"target.{field}", 'a "task" target does not take it')
        if not self.name:
            raise InvalidInput("target.name", "a task target needs the task's name", code="missing")
        timeout_ms = parse_duration_ms(self.timeout or "PT1M", field="target.timeout")
        return TaskTarget(name=self.name, args=self.args, timeout_s=timeout_ms / 1000)


def parse_delay_ms(value: str | int | float, field: str) -> int:
    """Like `parse_duration_ms`, but zero ("PT0S", 0) is a valid delay: retry at once."""
    if isinstance(value, int | float) and not isinstance(value, bool) and value <= 0:
        if value == 0:
            return 0
        message = f"a delay cannot be negative ({value!r}); give 0 (PT0S) or more"
        raise InvalidInput(field, message, code="invalid_duration")
    try:
        return parse_duration_ms(value, field=field)
    except InvalidInput as exc:
        # text only fails this way when it rounds below 1 ms: a zero delay ("PT0S", "P0D")
        if exc.code == "interval_too_short" and isinstance(value, str):
            return 0
        raise


_DEFAULT_RETRY = RetryPolicy()


class RetryIn(_Input):
    """What to do when an attempt fails; every field is optional."""

    max_attempts: WholeNumber = Field(
        _DEFAULT_RETRY.max_attempts,
        ge=1,
        le=MAX_ATTEMPTS,
        description="attempts in all, the first one included",
    )
    backoff: Duration = Field(
        format_duration_ms(_DEFAULT_RETRY.base_delay_ms),
        description="base delay before the second attempt; may be PT0S",
    )
    max_backoff: Duration = Field(
        format_duration_ms(_DEFAULT_RETRY.max_delay_ms),
        description="cap on the backoff; at least `backoff`",
    )
    multiplier: float = Field(
        _DEFAULT_RETRY.multiplier,
        strict=True,
        allow_inf_nan=False,
        ge=1,
        le=MAX_MULTIPLIER,
        description="growth of the backoff per attempt",
    )

    def to_domain(self) -> RetryPolicy:
        return retry_policy(
            max_attempts=self.max_attempts,
            base_delay_ms=parse_delay_ms(self.backoff, "retry.backoff"),
            max_delay_ms=parse_delay_ms(self.max_backoff, "retry.max_backoff"),
            multiplier=self.multiplier,
        )


class AlertIn(_Input):
    """Where to POST a JSON alert when one of the job's occurrences is dead-lettered."""

    url: str = Field(
        max_length=MAX_URL_CHARS,
        examples=["https://example.com/alerts"],
        **documented(pattern=URL_PATTERN),
    )
    headers: Headers = Field(default_factory=dict)

    @field_validator("url")
    @classmethod
    def _http_url(cls, url: str) -> str:
        _checked_url(url)
        return url

    def to_domain(self) -> AlertTarget:
        return AlertTarget(url=self.url, headers=dict(self.headers))


Name = Annotated[
    str, Field(min_length=1, max_length=MAX_NAME_CHARS, **documented(pattern=NOT_BLANK))
]
Tenant = Annotated[str, Field(min_length=1, max_length=MAX_TENANT_CHARS)]


# The bounds sit on the int itself, before the validator that turns 5.0 into 5: after it,
# pydantic wrote them into the JSON schema as unknown "ge"/"le" keywords, so the schema did not
# say that 0 is refused. Strict, as WholeNumber: true, "5" and 5.5 are no counts.
MaxRuns = Annotated[
    int,
    Field(strict=True, ge=1, le=MAX_RUNS),
    BeforeValidator(_whole),
    Field(description="complete after this many scheduled fires"),
]
Priority = Annotated[
    int,
    Field(strict=True, ge=MIN_PRIORITY, le=MAX_PRIORITY),
    BeforeValidator(_whole),
    Field(
        description="1..9, higher first when more is due than can be claimed at once (within"
        " the tenant's share); on time it changes nothing"
    ),
]
Overlap = Annotated[
    OverlapPolicy,
    Field(
        description="when an occurrence is due while the job's previous run is still going:"
        " allow (default: run side by side), skip, buffer_one or cancel_previous"
    ),
]


class JobCreate(_Input):
    name: Name
    tenant: Tenant = "default"
    schedule: ScheduleIn
    target: TargetIn
    retry: RetryIn | None = Field(None, description="default: 5 attempts, PT1S x2 up to PT5M")
    on_failure: AlertIn | None = Field(None, description="alert webhook for dead letters")
    overlap: Overlap | None = None
    max_runs: MaxRuns | None = Field(
        None, description="complete after this many scheduled fires; default: no limit"
    )
    priority: Priority = DEFAULT_PRIORITY

    def to_domain(self) -> JobSpec:
        schedule = replace(
            self.schedule.to_domain(),
            overlap=self.overlap or OverlapPolicy.ALLOW,
            max_runs=self.max_runs,
        )
        return JobSpec(
            name=self.name,
            tenant=self.tenant,
            schedule=schedule,
            target=self.target.to_domain(),
            retry=self.retry.to_domain() if self.retry else None,
            on_failure=self.on_failure.to_domain() if self.on_failure else None,
            priority=self.priority,
        )


class JobUpdate(_Input):
    """Only the fields given change; a given `schedule`, `target` or `retry` replaces the old
    one whole, except the target's `secrets`: a target without them keeps the job's (null or
    [] clears them). `on_failure` null removes the alert."""

    name: Name | None = None
    tenant: Tenant | None = None
    schedule: ScheduleUpdate | None = None
    target: TargetIn | None = None
    retry: RetryIn | None = None
    on_failure: AlertIn | None = None
    overlap: Overlap | None = None
    max_runs: MaxRuns | None = Field(
        None, description="complete after this many scheduled fires; null: no limit"
    )
    priority: Priority | None = None

    def to_domain(self) -> JobPatch:
        on_failure: AlertTarget | Literal[Keep.KEEP] | None = KEEP
        if "on_failure" in self.model_fields_set:
            on_failure = self.on_failure.to_domain() if self.on_failure else None
        return JobPatch(
            name=self.name,
            tenant=self.tenant,
            schedule=self._schedule_change(),
            target=self.target.to_domain() if self.target else None,
            retry=self.retry.to_domain() if self.retry else None,
            secrets=self.target.secrets_patch() if self.target else KEEP,
            on_failure=on_failure,
            priority=self.priority,
        )

    def _schedule_change(self) -> ScheduleChange | None:
        given = self.model_fields_set
        edit, overlap, max_runs = self.schedule, self.overlap, self.max_runs
        if edit is None and overlap is None and "max_runs" not in given:
            return None

        def change(old: Schedule) -> Schedule:
            new = old if edit is None else edit.apply(old)
            return replace(
                new,
                overlap=old.overlap if overlap is None else overlap,
                max_runs=max_runs if "max_runs" in given else old.max_runs,
            )

        return change


class PauseIn(_Input):
    note: str | None = Field(
        None, max_length=MAX_NOTE_CHARS, description="why: kept and shown until resumed"
    )


class ResumeIn(_Input):
    catch_up: bool = Field(
        False,
        description="false (default): from now on; true: the occurrences missed while paused"
        " are handled by the job's misfire policy",
    )


class TenantSecretsIn(_Input):
    secrets: Secrets = Field(**documented(minItems=1))  # none: TenantService says DELETE


# -- responses --------------------------------------------------------------------------------


def _iso(when: datetime | None) -> str | None:
    return None if when is None else utc_iso(when)


class ScheduleOut(_Output):
    cron: str | None = None
    timezone: str | None = None
    every: str | None = None
    anchor: InstantOut | None = None
    at: InstantOut | None = None
    start_at: InstantOut | None
    end_at: InstantOut | None
    misfire: MisfirePolicy
    misfire_grace: str
    catchup_window: str
    jitter: str | None = Field(description="null: none")
    window: str | None = Field(description="null: none")
    dst: dict[str, str] | None = None

    @model_serializer(mode="wrap")
    def _only_its_kind(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # the keys of the other trigger kinds are left out, not null: same shape as the input
        data: dict[str, Any] = handler(self)
        for key in ("cron", "timezone", "every", "anchor", "at", "dst"):
            if data.get(key) is None:
                data.pop(key, None)
        return data

    @classmethod
    def of(cls, schedule: Schedule) -> ScheduleOut:
        trigger = schedule.trigger
        kind: dict[str, Any]
        if isinstance(trigger, CronTrigger):
            kind = {"cron": trigger.expr, "timezone": trigger.timezone}
        elif isinstance(trigger, EveryTrigger):
            every = format_duration_ms(trigger.interval_ms)
            kind = {"every": every, "anchor": utc_iso(trigger.anchor)}
        else:
            kind = {"at": utc_iso(trigger.at)}
        return cls(
            **kind,
            start_at=_iso(schedule.start_at),
            end_at=_iso(schedule.end_at),
            misfire=schedule.misfire,
            misfire_grace=format_duration_ms(schedule.misfire_grace_ms),
            catchup_window=format_duration_ms(schedule.catchup_window_ms),
            jitter=format_duration_ms(schedule.jitter_ms) if schedule.jitter_ms else None,
            window=format_duration_ms(schedule.window_ms) if schedule.window_ms else None,
            dst=(
                {"gap": schedule.dst_gap.value, "repeat": schedule.dst_repeat.value}
                if isinstance(trigger, CronTrigger)
                else None
            ),
        )


class TaskTargetOut(_Output):
    type: Literal["task"] = "task"
    name: str
    args: JsonValue
    timeout: str

    @classmethod
    def of(cls, target: TaskTarget) -> TaskTargetOut:
        timeout = format_duration_ms(round(target.timeout_s * 1000))
        return cls(name=target.name, args=target.args, timeout=timeout)


class SigningOut(_Output):
    """How the job's requests are signed; its secrets are write-only and never shown."""

    source: Literal["job", "inherit", "unsigned"] = Field(
        description="job: with the job's own secrets (target.secrets); inherit: with the"
        " tenant's, else the workers' TICKWORK_WEBHOOK_SECRETS, else unsigned; unsigned: the"
        " job opted out (target.signed false)"
    )
    fingerprints: list[str] = Field(
        description="first 8 hex digits of SHA-256 of each of the job's secrets; compare"
        " with tickwork.webhooks.fingerprint(secret)"
    )

    @classmethod
    def of(cls, target: WebhookTarget | TaskTarget) -> SigningOut:
        secrets = target.secrets if isinstance(target, WebhookTarget) else ()
        if isinstance(target, WebhookTarget) and not target.signed:
            return cls(source="unsigned", fingerprints=[])
        return cls(
            source="job" if secrets else "inherit",
            fingerprints=[fingerprint(secret) for secret in secrets],
        )


MASKED_URL = f"the URL, its password (if any) shown as {MASK}; send it back as is to keep it"
MASKED_HEADERS = (
    f"secret header values (Authorization, Cookie, names with key, token, secret, auth...) are"
    f" shown as {MASK}; send {MASK} back to keep the stored value"
)


class TargetOut(_Output):
    type: Literal["webhook"] = "webhook"
    url: str = Field(description=MASKED_URL)
    method: str
    headers: dict[str, str] = Field(description=MASKED_HEADERS)
    body: JsonValue
    timeout: str
    signed: bool

    @classmethod
    def of(cls, target: WebhookTarget) -> TargetOut:
        return cls(
            url=mask_url(target.url),
            method=target.method,
            headers=mask_headers(target.headers),
            body=target.body,
            timeout=format_duration_ms(round(target.timeout_s * 1000)),
            signed=target.signed,
        )


class AlertOut(_Output):
    url: str = Field(description=MASKED_URL)
    headers: dict[str, str] = Field(
        description=f"every value shown as {MASK}; send {MASK} back to keep the stored value"
    )

    @classmethod
    def of(cls, alert: AlertTarget) -> AlertOut:
        return cls(url=mask_url(alert.url), headers=mask_headers(alert.headers, all_secret=True))


class TenantSecretsOut(_Output):
    tenant: str
    signing: Literal["tenant", "inherit"] = Field(
        description="tenant: its jobs without secrets of their own are signed with these;"
        " inherit: with the workers' TICKWORK_WEBHOOK_SECRETS, else unsigned"
    )
    fingerprints: list[str] = Field(description="first 8 hex digits of SHA-256 of each secret")
    updated_at: InstantOut | None

    @classmethod
    def of(cls, signing: TenantSigning) -> TenantSecretsOut:
        return cls(
            tenant=signing.tenant,
            signing="tenant" if signing.fingerprints else "inherit",
            fingerprints=list(signing.fingerprints),
            updated_at=_iso(signing.updated_at),
        )


class TenantSecretRotated(TenantSecretsOut):
    secret: str = Field(
        description="the new signing secret (whsec_...): shown in this answer only; it signs"
        " first, beside the previous one until that is retired"
    )

    @classmethod
    def made(cls, new: NewSecret) -> TenantSecretRotated:
        return cls(**TenantSecretsOut.of(new.signing).model_dump(), secret=new.secret)


class RetryOut(_Output):
    max_attempts: int
    backoff: str
    max_backoff: str
    multiplier: float

    @classmethod
    def of(cls, policy: RetryPolicy) -> RetryOut:
        return cls(
            max_attempts=policy.max_attempts,
            backoff=format_duration_ms(policy.base_delay_ms),
            max_backoff=format_duration_ms(policy.max_delay_ms),
            multiplier=policy.multiplier,
        )


class JobOut(_Output):
    id: str = Field(examples=["0191b0c4d2a87f3e9c1b2a3d4e5f6a7b"])
    name: str
    tenant: str
    state: JobState
    schedule: ScheduleOut
    target: TargetOut | TaskTargetOut
    signing: SigningOut
    retry: RetryOut
    on_failure: AlertOut | None
    overlap: OverlapPolicy
    max_runs: int | None
    priority: int
    fired_count: int = Field(description="scheduled fires so far (what max_runs counts)")
    pause_note: str | None
    paused_at: InstantOut | None
    next_run_at: InstantOut | None = Field(
        description="when the next occurrence fires: its instant, moved by the schedule's"
        " jitter or window"
    )
    next_scheduled_for: InstantOut | None = Field(
        description="the next occurrence's own instant (what its run's scheduled_for will be)"
    )
    last_fired_at: InstantOut | None
    fence_token: int
    created_at: InstantOut
    updated_at: InstantOut

    @classmethod
    def of(cls, job: Job) -> JobOut:
        return cls(
            id=job.id,
            name=job.name,
            tenant=job.tenant,
            state=job.state,
            schedule=ScheduleOut.of(job.schedule),
            target=(
                TaskTargetOut.of(job.target)
                if isinstance(job.target, TaskTarget)
                else TargetOut.of(job.target)
            ),
            signing=SigningOut.of(job.target),
            retry=RetryOut.of(job.retry),
            on_failure=AlertOut.of(job.on_failure) if job.on_failure else None,
            overlap=job.schedule.overlap,
            max_runs=job.schedule.max_runs,
            priority=job.priority,
            fired_count=job.fired_count,
            pause_note=job.pause_note,
            paused_at=_iso(job.paused_at),
            # The store keeps a completed job's last instant (its claim only moves state); to
            # the user a completed job has no next run.
            next_run_at=None if job.state is JobState.COMPLETED else _iso(job.next_run_at),
            next_scheduled_for=(
                None
                if job.state is JobState.COMPLETED or job.next_run_at is None
                else utc_iso(nominal_of(job.schedule, job.next_run_at))
            ),
            last_fired_at=_iso(job.last_fired_at),
            fence_token=job.fence_token,
            created_at=utc_iso(job.created_at),
            updated_at=utc_iso(job.updated_at),
        )


class JobList(_Output):
    jobs: list[JobOut]
    next_after: str | None = Field(description="pass as ?after= for the next page; null: done")


class RunOut(_Output):
    id: int
    job_id: str
    key: str = Field(description="idempotency key: the same for every attempt of an occurrence")
    origin: RunOrigin
    scheduled_for: InstantOut
    planned_for: InstantOut | None = Field(
        None,
        description="a jittered or windowed occurrence: the instant it was planned to fire at"
        " (null: at scheduled_for)",
    )
    state: RunState = Field(
        description="what the run is doing now: pending, running, retrying, succeeded, "
        "failed, dead_lettered or cancelled (read this one)"
    )
    status: RunStatus = Field(
        description="the stored status, kept for compatibility: pending covers pending, "
        "running and retrying"
    )
    attempt: int
    fence_token: int
    worker: str | None = Field(description="the node id of the worker holding it, while running")
    lease_until: InstantOut | None = Field(
        description="running: when its lease ends unless renewed; pending or retrying: from "
        "when a worker may lease it; null once finished"
    )
    coalesced: int
    created_at: InstantOut
    started_at: InstantOut | None
    finished_at: InstantOut | None
    http_status: int | None
    error: str | None
    dead_lettered_at: InstantOut | None = Field(description="set while in the dead-letter queue")
    last_error: str | None = Field(description="the latest attempt's error")
    claim_epoch: int | None = Field(
        None,
        description="the epoch of the job's partition lease when the scheduler claimed this "
        "occurrence (null for manual runs)",
    )
    throttled_ms: int | None = Field(
        None,
        description="how much later than its instant the occurrence was claimed because the "
        "global fire ceiling held it back, in ms (null: not throttled)",
    )

    @classmethod
    def of(cls, run: Run, now: datetime) -> RunOut:
        """The run as shown at `now` (its state depends on whether its lease is still live)."""
        return cls(**cls._fields_of(run, now))

    @staticmethod
    def _fields_of(run: Run, now: datetime) -> dict[str, Any]:
        state = run_state(run, now)
        return dict(
            id=run.id,
            job_id=run.job_id,
            key=run.key,
            origin=run.origin,
            scheduled_for=utc_iso(run.scheduled_for),
            planned_for=_iso(run.planned_for),
            state=state,
            status=run.status,
            attempt=run.attempt,
            fence_token=run.fence_token,
            worker=run.lease_owner if state is RunState.RUNNING else None,
            lease_until=_iso(run.lease_until),
            coalesced=run.coalesced,
            created_at=utc_iso(run.created_at),
            started_at=_iso(run.started_at),
            finished_at=_iso(run.finished_at),
            http_status=run.http_status,
            error=run.error,
            dead_lettered_at=_iso(run.dead_lettered_at),
            last_error=run.last_error,
            claim_epoch=run.claim_epoch,
            throttled_ms=run.throttled_ms,
        )


class RunList(_Output):
    runs: list[RunOut]
    next_before: int | None = Field(description="pass as ?before= for older runs; null: done")


AttemptStatusOut = Literal["succeeded", "failed", "retry", "lost", "cancelled"]
_ATTEMPT_STATUS: dict[AttemptStatus, AttemptStatusOut] = {
    AttemptStatus.SUCCEEDED: "succeeded",
    AttemptStatus.FAILED: "failed",
    AttemptStatus.RETRIED: "retry",  # the attempt failed and another one was scheduled
    AttemptStatus.LOST: "lost",  # its worker stopped heartbeating; another attempt follows
    AttemptStatus.CANCELLED: "cancelled",  # overlap cancel_previous stopped it
}


class AttemptOut(_Output):
    attempt: int
    fence_token: int
    worker: str | None
    started_at: InstantOut
    finished_at: InstantOut
    status: AttemptStatusOut = Field(
        description="retry: failed, and another attempt followed; lost: its worker stopped "
        "heartbeating and its lease expired without an outcome"
    )
    http_status: int | None
    error: str | None

    @classmethod
    def of(cls, record: AttemptRecord) -> AttemptOut:
        return cls(
            attempt=record.attempt,
            fence_token=record.fence_token,
            worker=record.worker,
            started_at=utc_iso(record.started_at),
            finished_at=utc_iso(record.finished_at),
            status=_ATTEMPT_STATUS[record.status],
            http_status=record.http_status,
            error=record.error,
        )


class RunDetailOut(RunOut):
    attempts: list[AttemptOut] = Field(description="oldest first")

    @classmethod
    def of_detail(cls, detail: RunDetail) -> RunDetailOut:
        attempts = [AttemptOut.of(a) for a in detail.attempts]
        return cls(**cls._fields_of(detail.run, detail.as_of), attempts=attempts)


class DeadLetterList(_Output):
    dead_letters: list[RunOut]
    next_before: int | None = Field(description="pass as ?before= for older ones; null: done")


class RedriveOut(_Output):
    redriven: int


class PurgeOut(_Output):
    purged: int


class FireOut(_Output):
    utc: InstantOut
    local: str = Field(
        description="the same instant in a cron schedule's zone, with its offset (every, at: UTC)"
    )
    note: str | None = Field(
        description="set when a DST change moved or merged this fire, or a one-shot is late"
    )


class EndOut(_Output):
    reason: EndReason = Field(
        description="max_runs, end_at, one_shot, horizon (no match within 50 years) or completed"
    )
    message: str


class PreviewOut(_Output):
    fires: list[FireOut]
    ends: EndOut | None = Field(
        description="set when no fire follows the last one listed (or there is none): why; "
        "null: more follow"
    )

    @classmethod
    def of(cls, preview: SchedulePreview) -> PreviewOut:
        return cls(**cls._fields_of(preview))

    @staticmethod
    def _fields_of(preview: SchedulePreview) -> dict[str, Any]:
        fires = [
            FireOut(utc=utc_iso(e.utc), local=e.local.isoformat(), note=e.note)
            for e in preview.fires
        ]
        ends = preview.ends
        end = None if ends is None else EndOut(reason=ends.reason, message=ends.message)
        return {"fires": fires, "ends": end}


class JobFireOut(FireOut):
    planned_for: InstantOut | None = Field(
        None,
        description="a jittered or windowed fire: when it fires (null: at `utc`, or a window"
        " placed only when the fire before it is claimed)",
    )


class JobPreviewOut(PreviewOut):
    fires: list[JobFireOut]  # type: ignore[assignment]
    job_id: str
    state: JobState = Field(
        description="paused: the fires are those it would make if resumed now; completed: none"
    )

    shift: str | None = Field(None, description="how the job's jitter or window moves its fires")

    @classmethod
    def of_job(cls, job: Job, preview: SchedulePreview) -> JobPreviewOut:
        fields = cls._fields_of(preview)
        stored = job.next_run_at if job.state is JobState.SCHEDULED else None
        fires = []
        for fire, entry in zip(fields.pop("fires"), preview.fires, strict=True):
            planned = known_planned(job.id, job.schedule, entry.utc, stored)
            fires.append(JobFireOut(**fire.model_dump(), planned_for=planned and utc_iso(planned)))
        return cls(
            job_id=job.id, state=job.state, shift=shift_note(job.schedule), fires=fires, **fields
        )


class Health(_Output):
    status: Literal["ok"] = "ok"


class ErrorDetail(_Output):
    code: str = Field(examples=["invalid"])
    message: str
    field: str | None = Field(description="dotted path of the offending input, if one")


class ErrorOut(_Output):
    error: ErrorDetail
