"""The one settings class of the service and its workers (env ``PREFLIGHT_*``)."""

from __future__ import annotations

import re
from functools import lru_cache

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["LOOPBACK_HOSTS", "Settings", "get_settings"]

LOOPBACK_HOSTS = frozenset({"127.0.0.1", "::1", "localhost"})
_HOUR, _DAY = 3600.0, 86400.0
_ENGINE_MEMORY_FLOOR = 2**30  # below it the engine child dies importing torch
_ROOT_PATH = re.compile(r"(/[A-Za-z0-9._~!$&'()*+,;=:@%-]+)+")


class Settings(BaseSettings):
    """Where the store is, how the API listens, and how the queue leases jobs.

    Every field reads the environment variable ``PREFLIGHT_<FIELD>`` (upper case).
    """

    model_config = SettingsConfigDict(env_prefix="PREFLIGHT_", frozen=True, extra="ignore")

    database_url: str = "sqlite:///./preflight.db"
    host: str = "127.0.0.1"
    port: int = Field(8000, ge=0, le=65535)
    # The path prefix a reverse proxy serves the API under, and strips (``/preflight``): the API
    # answers at its own paths, and problem ``instance`` fields and the docs page carry it.
    root_path: str = ""
    # None: bearer tokens are required exactly when ``host`` is not a loopback address.
    # True forces them on localhost too; False has no effect unless ``host`` is loopback (beyond it
    # tokens are always required).
    require_auth: bool | None = None
    # Revocation takes effect within this many seconds (tokens are cached in memory).
    token_cache_seconds: float = Field(5.0, ge=0, le=_HOUR, allow_inf_nan=False)
    # The highest priority a token that is not admin gets: a submission asking for more is
    # queued at this (lowering is free), so that no tenant can put its work ahead of everyone's.
    max_token_priority: int = Field(10, ge=-1000, le=1000)
    max_body_bytes: int = Field(4 * 2**20, ge=1024)
    # POST /v1/batches: 2**20 numbers (the most a batch holds) at 32 bytes each: float64's longest
    # JSON number (24), ", " and a list's brackets of its own; the client writes float32 in about 12
    max_batch_body_bytes: int = Field(32 * 2**20, ge=1024)
    max_batch: int = Field(256, ge=1)
    max_wait_seconds: float = Field(60.0, gt=0, le=_HOUR, allow_inf_nan=False)
    # Long-polls one owner may hold open in an API process: each polls the store through the
    # shared thread pool, and 300 from one tenant slowed every other tenant's reads 100-fold.
    max_waits_per_owner: int = Field(64, ge=1, le=100_000)
    # Submissions one token that is not admin may hold queued or running (0: no limit): a tenant
    # that queued 100,000 jobs held the workers for days, and every claim slows as the queue grows.
    max_queued_per_owner: int = Field(10_000, ge=0, le=10_000_000)
    # Data batches one token that is not admin may store (0: no limit). A batch is kept until the
    # token deletes it (DELETE /v1/batches/{id}), up to 2**20 numbers stored as JSON (about 22 MB),
    # so an unbounded token could fill the database's disk; a search uploads one or a few.
    max_batches_per_owner: int = Field(100, ge=0, le=10_000_000)
    page_size: int = Field(50, ge=1, le=1000)
    # Threads of an API process for blocking (database) work, and so its connection pool
    # size. Few is faster on a local database (the threads contend for the GIL: 4 threads
    # served 1.3x the reads/s of 16 in bench/perf/service_load.py); a distant database, whose
    # round trips take milliseconds, wants more.
    api_threads: int = Field(4, ge=1, le=256)
    # The queue.
    # Every duration is finite and bounded: timestamps and timedeltas past these overflow.
    lease_seconds: float = Field(30.0, gt=0, le=_DAY, allow_inf_nan=False)
    heartbeat_seconds: float = Field(5.0, gt=0, le=_HOUR, allow_inf_nan=False)
    max_attempts: int = Field(3, ge=1, le=1000)
    job_timeout_seconds: float = Field(1800.0, gt=0, le=7 * _DAY, allow_inf_nan=False)
    shutdown_grace_seconds: float = Field(30.0, ge=0, le=_DAY, allow_inf_nan=False)
    poll_seconds: float = Field(0.5, gt=0, le=_HOUR, allow_inf_nan=False)
    # A file a worker touches while it can take jobs (at most every heartbeat): a container's
    # healthcheck reads its age. None: no file.
    worker_alive_file: str | None = None
    # The engine child's memory limit in bytes (address space on the CPU, the allocator's share of a
    # GPU); None: three quarters of the machine's memory on the CPU, none on a GPU; 0: no limit.
    engine_memory_bytes: int | None = Field(None, ge=0, le=2**62)
    # Start-up refuses a database whose schema is not at the latest migration.
    check_migrations: bool = True

    @field_validator("engine_memory_bytes")
    @classmethod
    def _room_to_start_the_engine(cls, limit: int | None) -> int | None:
        """Importing torch alone takes hundreds of MB: a smaller limit kills the engine child as it
        starts, which a worker retries forever, saying only that it died."""
        if limit is not None and 0 < limit < _ENGINE_MEMORY_FLOOR:
            raise ValueError(
                f"engine_memory_bytes {limit} is too small to start the engine (at least {_ENGINE_MEMORY_FLOOR}, "
                "1 GiB; 0 turns the limit off)"
            )
        return limit

    @field_validator("root_path")
    @classmethod
    def _a_path_prefix(cls, prefix: str) -> str:
        """uvicorn joins the prefix to each request's path as given: without its leading slash
        ``preflight/v1/...`` matches no route, and with a trailing one ``//v1/...`` does not either."""
        if prefix and not _ROOT_PATH.fullmatch(prefix):
            raise ValueError(
                f"root_path {prefix!r} is not a path prefix: give it as /name (a leading slash, none at the end, "
                "no query, no spaces), or leave it empty"
            )
        return prefix

    @model_validator(mode="after")
    def _heartbeat_within_lease(self) -> Settings:
        """A worker renews its lease every heartbeat: a heartbeat as long as the lease lets the lease
        expire under a healthy worker, and another worker takes its job."""
        if self.heartbeat_seconds >= self.lease_seconds:
            raise ValueError(
                f"heartbeat_seconds ({self.heartbeat_seconds:g}) must be shorter than lease_seconds "
                f"({self.lease_seconds:g}); a third of it or less is safe"
            )
        return self

    @property
    def auth_required(self) -> bool:
        if self.host not in LOOPBACK_HOSTS:
            return True
        return bool(self.require_auth)


@lru_cache
def get_settings() -> Settings:
    return Settings()
