"""The SQL store: candidates (which are also the queue's jobs), who submitted them, the
figures of their reports as queryable rows, and API tokens.

Tenancy (``service.store.owners``): a ``candidates`` row is the shared job and result of one
cache key; each owner (token) that submitted it holds an ``owned_candidates`` row, which is
what the API calls a candidate (its opaque public id, the owner's study, trial and priority,
and whether that owner cancelled it). Data batches are shared the same way
(``data_batch_owners``).

A user can ask the database directly, e.g. the tuned multiplier of every first layer::

    SELECT c.id, s.multiplier FROM candidate_scales s JOIN candidates c ON c.id = s.candidate_id
    WHERE s.parameter = 'blocks.0.0.weight' AND c.status = 'done';
"""

from __future__ import annotations

import enum
from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    false,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

from nas.spec import STUDY_NAME_LENGTH  # migration 0006; 200 before it

__all__ = [
    "ApiToken",
    "Base",
    "BlockFigure",
    "Candidate",
    "DataBatch",
    "DataBatchOwner",
    "LayerFigure",
    "OwnedCandidate",
    "ScaleFactor",
    "STUDY_NAME_LENGTH",
    "Status",
    "Submission",
]

JSONType = JSON().with_variant(JSONB(), "postgresql")
# SQLite only gives INTEGER PRIMARY KEY the rowid alias (autoincrement); PostgreSQL gets bigint.
IdType = BigInteger().with_variant(Integer(), "sqlite")


class Status(enum.StrEnum):
    """Where a candidate is in its life. Stored as its value (a short string)."""

    QUEUED = "queued"
    """Waiting for a worker; also where an expired lease or a retried failure goes back to."""
    RUNNING = "running"
    """Leased by a worker, whose heartbeat keeps ``leased_until`` in the future."""
    DONE = "done"
    """Conditioned; the report and its rows were written with this status, in one transaction."""
    FAILED = "failed"
    """Gave up after ``max_attempts`` attempts (or on an error that retrying cannot fix)."""
    CANCELLED = "cancelled"
    """Cancelled by a client before it was done; submitting it again queues it again."""

    @property
    def is_final(self) -> bool:
        return self in (Status.DONE, Status.FAILED, Status.CANCELLED)


class Base(DeclarativeBase):
    type_annotation_map = {dict[str, Any]: JSONType}


class Candidate(Base):
    """One (canonical spec, tuning options) pair: the unit of work and of caching."""

    __tablename__ = "candidates"
    __table_args__ = (
        Index("ix_candidates_claim", "status", "device", "priority", "id"),
        Index("ix_candidates_lease", "status", "leased_until"),
    )

    id: Mapped[int] = mapped_column(IdType, primary_key=True, autoincrement=True)
    cache_key: Mapped[str] = mapped_column(String(64), unique=True)
    spec_hash: Mapped[str] = mapped_column(String(64), index=True)
    # service.revision.engine_revision of the service that queued it (part of the cache key);
    # None: queued before migration 0004, claimable by any worker
    engine: Mapped[str | None] = mapped_column(String(16))
    spec: Mapped[dict[str, Any]]  # as parsed (nas.parse_spec), defaults left implicit
    options: Mapped[dict[str, Any]]  # tuning options, as given to the engine
    study: Mapped[str | None] = mapped_column(String(STUDY_NAME_LENGTH))  # of the first submission
    trial: Mapped[int | None] = mapped_column(BigInteger)
    device: Mapped[str] = mapped_column(String(16), default="any")  # any | cpu | cuda
    priority: Mapped[int] = mapped_column(Integer, default=0)
    status: Mapped[Status] = mapped_column(String(16), default=Status.QUEUED)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    max_attempts: Mapped[int] = mapped_column(Integer, default=3)
    lease_token: Mapped[str | None] = mapped_column(String(64))
    leased_until: Mapped[datetime | None] = mapped_column(DateTime)
    worker: Mapped[str | None] = mapped_column(String(200))
    error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime)
    started_at: Mapped[datetime | None] = mapped_column(DateTime)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime)
    # Copied out of the report for filtering, ordering and quantiles.
    score: Mapped[float | None] = mapped_column(Float)
    verdict: Mapped[str | None] = mapped_column(String(16))
    tuning_seconds: Mapped[float | None] = mapped_column(Float)
    report: Mapped[dict[str, Any] | None]

    blocks: Mapped[list[BlockFigure]] = relationship(cascade="all, delete-orphan", lazy="raise")
    layers: Mapped[list[LayerFigure]] = relationship(cascade="all, delete-orphan", lazy="raise")
    scales: Mapped[list[ScaleFactor]] = relationship(cascade="all, delete-orphan", lazy="raise")


class OwnedCandidate(Base):
    """One owner's submission of a candidate: what the API shows as a candidate. Owners that
    submit the same cache key share the ``candidates`` row (the job, its report) but each has
    its own row here, so its own id, and cancels only its own (the job stops when no owner
    still wants it)."""

    __tablename__ = "owned_candidates"
    __table_args__ = (
        UniqueConstraint("owner_id", "candidate_id"),
        Index("ix_owned_candidates_owner", "owner_id", "id"),
    )

    id: Mapped[int] = mapped_column(IdType, primary_key=True, autoincrement=True)  # order and cursors only
    public_id: Mapped[str] = mapped_column(String(32), unique=True)  # the id in the API: 128 random bits
    candidate_id: Mapped[int] = mapped_column(ForeignKey("candidates.id", ondelete="CASCADE"), index=True)
    owner_id: Mapped[int] = mapped_column(BigInteger)  # the token's id; 0: anonymous (auth off)
    # of this owner's first submission (of its last, once it cancelled and submitted again)
    study: Mapped[str | None] = mapped_column(String(STUDY_NAME_LENGTH))
    trial: Mapped[int | None] = mapped_column(BigInteger)
    priority: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(DateTime)
    cancelled_at: Mapped[datetime | None] = mapped_column(DateTime)  # this owner cancelled it (until it resubmits)


class Submission(Base):
    """One request for a candidate by a study's trial; a cache hit adds a row here only. A study
    is its owner's: ``owner_id`` with ``study`` names it."""

    __tablename__ = "submissions"
    __table_args__ = (Index("ix_submissions_study", "study", "owner_id", "candidate_id"),)

    id: Mapped[int] = mapped_column(IdType, primary_key=True, autoincrement=True)
    candidate_id: Mapped[int] = mapped_column(ForeignKey("candidates.id", ondelete="CASCADE"), index=True)
    owner_id: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    study: Mapped[str | None] = mapped_column(String(STUDY_NAME_LENGTH))
    trial: Mapped[int | None] = mapped_column(BigInteger)
    created_at: Mapped[datetime] = mapped_column(DateTime)


class BlockFigure(Base):
    """APJN and K at one block boundary, before and after tuning."""

    __tablename__ = "candidate_blocks"
    __table_args__ = (UniqueConstraint("candidate_id", "block_index"),)

    id: Mapped[int] = mapped_column(IdType, primary_key=True, autoincrement=True)
    candidate_id: Mapped[int] = mapped_column(ForeignKey("candidates.id", ondelete="CASCADE"))
    block_index: Mapped[int] = mapped_column(Integer)
    apjn_before: Mapped[float | None] = mapped_column(Float)
    apjn_after: Mapped[float | None] = mapped_column(Float)
    k_before: Mapped[float | None] = mapped_column(Float)
    k_after: Mapped[float | None] = mapped_column(Float)


class LayerFigure(Base):
    """Scaling exponents, Hessian figures and kappa(D) of one weighted layer."""

    __tablename__ = "candidate_layers"
    __table_args__ = (UniqueConstraint("candidate_id", "name"),)

    id: Mapped[int] = mapped_column(IdType, primary_key=True, autoincrement=True)
    candidate_id: Mapped[int] = mapped_column(ForeignKey("candidates.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(300))
    fan_in: Mapped[int | None] = mapped_column(BigInteger)
    fan_out: Mapped[int | None] = mapped_column(BigInteger)
    gamma: Mapped[float | None] = mapped_column(Float)
    nu: Mapped[float | None] = mapped_column(Float)
    hessian_top_eigenvalue: Mapped[float | None] = mapped_column(Float)
    hessian_chain_rule: Mapped[float | None] = mapped_column(Float)
    hessian_mean_sq_singular: Mapped[float | None] = mapped_column(Float)
    kappa_d: Mapped[float | None] = mapped_column(Float)


class ScaleFactor(Base):
    """One tuned multiplier: train ``nas.build_model(spec, scales={parameter: multiplier})``."""

    __tablename__ = "candidate_scales"
    __table_args__ = (UniqueConstraint("candidate_id", "parameter"),)

    id: Mapped[int] = mapped_column(IdType, primary_key=True, autoincrement=True)
    candidate_id: Mapped[int] = mapped_column(ForeignKey("candidates.id", ondelete="CASCADE"))
    parameter: Mapped[str] = mapped_column(String(300))
    multiplier: Mapped[float] = mapped_column(Float)


class ApiToken(Base):
    """A bearer token, kept as its SHA-256 (tokens are 256 random bits: no slow hash needed)."""

    __tablename__ = "api_tokens"
    # one active token per name, so `preflight token revoke NAME` means one token; revoked ones may share it
    __table_args__ = (
        Index(
            "ux_api_tokens_active_name",
            "name",
            unique=True,
            sqlite_where=text("revoked_at IS NULL"),
            postgresql_where=text("revoked_at IS NULL"),
        ),
    )

    id: Mapped[int] = mapped_column(IdType, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(200))
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    prefix: Mapped[str] = mapped_column(String(16))  # first characters, to recognise a token
    # an admin token sees every owner's candidates, batches and studies, and its priority is not capped
    admin: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    created_at: Mapped[datetime] = mapped_column(DateTime)
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime)


class DataBatch(Base):
    """A batch of inputs (and optionally labels) a client uploaded for conditioning on its own
    data: candidates name it in their options (``data``), and the worker conditions and runs
    the trainability probe on it instead of a Gaussian batch without labels. Its id is the
    SHA-256 of its content, so the same batch uploaded twice is one row, and the cache key of a
    candidate (which includes the id) changes exactly when the data does."""

    __tablename__ = "data_batches"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    shape: Mapped[dict[str, Any]]  # {"x": [N, *input_shape], "labels": "class" | "float" | null}
    x: Mapped[dict[str, Any]]  # {"values": nested lists}
    y: Mapped[dict[str, Any] | None]  # {"values": list} or null
    created_at: Mapped[datetime] = mapped_column(DateTime)


class DataBatchOwner(Base):
    """An owner's hold on a data batch: the content is stored once, and each owner that uploaded
    it may read it and name it in its submissions; to any other token it does not exist."""

    __tablename__ = "data_batch_owners"
    __table_args__ = (Index("ix_data_batch_owners_owner", "owner_id", "batch_id"),)  # migration 0007

    batch_id: Mapped[str] = mapped_column(ForeignKey("data_batches.id", ondelete="CASCADE"), primary_key=True)
    owner_id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    created_at: Mapped[datetime] = mapped_column(DateTime)
