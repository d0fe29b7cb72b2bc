"""Data batches: a client's own inputs (and labels) that candidates are conditioned on.

Without data a worker conditions on a Gaussian batch and its trainability probe fits random
labels; on the benchmark that flags untrainable candidates with precision 0.82 at recall 0.74
(held-out), against 1.00 at 0.84 on a real labelled batch (docs/conditioning.md, section 7).
``POST /v1/batches`` stores a batch once under the SHA-256 of its content as the engine reads it
(``batch_id``); a submission names it with the option ``data`` (part of the cache key), and the
worker hands it to ``worker.engine.condition(spec, data={"x": ..., "y": ...})``.

A batch belongs to each owner that uploaded it (``data_batch_owners``; the content is stored
once): to any other token it does not exist, neither to read nor to name in a submission. An
owner lets go of it with ``release`` (``DELETE /v1/batches/{id}``); the content goes with the last
hold, unless a queued or running job still names it.
"""

from __future__ import annotations

import hashlib
import json
import math
from datetime import UTC, datetime
from typing import Any

import numpy as np
from sqlalchemy import Connection, Select, delete, func, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from nas import ArchitectureSpec
from nas.canonical import DATA_OPTION as DATA
from nas.options import ConditionOptions
from nas.shapes import trace_shapes
from nas.spec import json_key
from nas.targets import (
    head_imbalance_warning,
    imbalance_warning,
    label_balance,
    one_class_warning,
    target_error,
    whole_floats_warning,
)
from service.store.db import insert_ignoring_duplicates
from service.store.errors import BatchInUse, BatchQuotaReached, InvalidBatch
from service.store.models import Candidate, DataBatch, DataBatchOwner, OwnedCandidate, Status
from service.store.owners import ANONYMOUS, ANONYMOUS_OWNER, Caller

__all__ = [
    "MAX_ROWS",
    "MAX_VALUES",
    "BatchInUse",
    "BatchQuotaReached",
    "BatchShape",
    "InvalidBatch",
    "check_batch_size",
    "check_fits",
    "held",
    "is_batch_id",
    "label_warnings",
    "load",
    "parse",
    "release",
    "shape_of",
    "store",
]

MAX_ROWS = 4096  # the engine's largest batch_size
MAX_VALUES = 2**20  # numbers in x: a body of max_batch_body_bytes (32 MiB) carries them at 32 bytes each
MAX_RANK = 5  # [N, C, H, W] is 4; deeper nesting is refused before it is walked
X_RANKS = (2, 4)  # [N, D] and [N, C, H, W]: a spec's input_shape is [D] or [C, H, W]
# a job conditions on the batch's first batch_size samples: at the default, these
DEFAULT_BATCH_SIZE: int = ConditionOptions.model_fields["batch_size"].default

# {"x": [N, *input_shape], "labels": "class" | "float" | None, "y": [N, ...] when labelled,
#  "classes": 1 + the largest class label, "present": how many distinct class labels occur,
#  "balance": nas.targets.label_balance, "head_balance": the same over the first
#  DEFAULT_BATCH_SIZE samples (when N is larger), "whole_floats": float labels that are all whole
#  numbers (class labels sent as floats?), "first_distinct": the first sample that differs from
#  sample 0}; batches stored before a key was added lack it
BatchShape = dict[str, Any]


MAX_INTEGER = 2**53  # the largest integer a float32 / float64 batch can take without loss of meaning
FLOAT32_MAX = float(np.finfo(np.float32).max)  # the engine reads x as float32: beyond it a number is infinite


def _invalid(path: str, message: str) -> InvalidBatch:
    return InvalidBatch(path, message)


def _as_array(value: Any) -> np.ndarray | None:
    """numpy's reading of a nested list (read once per upload: the shape and the first distinct
    sample both use it); None when numpy cannot read it."""
    if not isinstance(value, list):
        return None
    try:
        return np.asarray(value)
    except (ValueError, TypeError, OverflowError):
        return None


def _fast_shape(value: Any, array: np.ndarray | None = None) -> list[int] | None:
    """The shape by numpy (``array``: ``value`` as numpy read it, when already read), for a
    well-formed batch (about 20x faster than the walk below on 2**20 numbers); None whenever
    anything is off (ragged, empty, not finite, beyond 2**53, a string or a boolean anywhere), and
    the walk then finds and names the fault."""
    if array is None:
        array = _as_array(value)
    if array is None:
        return None
    if array.dtype.kind not in "if" or array.ndim > MAX_RANK + 1 or 0 in array.shape:
        return None
    if array.dtype.kind == "f" and not bool(np.isfinite(array).all()):
        return None
    # beyond 2**53 the walk decides (an integer there is refused, a float kept below float32's max); in Python numbers,
    # since numpy's abs of int64's minimum is itself, and an integer mixed with floats is a float here
    if max(array.max().item(), -array.min().item()) > MAX_INTEGER:
        return None
    if _has_bool(value):  # numpy reads True as 1: JSON's true is not a number here
        return None
    return [int(n) for n in array.shape]


def _has_bool(value: Any) -> bool:
    if value and isinstance(value[0], list):
        return any(_has_bool(item) for item in value)
    return any(type(item) is bool for item in value)


def _shape(value: Any, path: str, depth: int = 0, array: np.ndarray | None = None) -> list[int]:
    """The shape of a rectangular nested list of numbers (a scalar has shape []); ``array``: the
    list as numpy read it, when already read."""
    if depth == 0 and (fast := _fast_shape(value, array)) is not None:
        return fast
    if depth > MAX_RANK:
        raise _invalid(path, f"nested deeper than {MAX_RANK} levels: expected [N, *input_shape]")
    if isinstance(value, bool) or value is None or isinstance(value, str | dict):
        raise _invalid(path, f"expected a number or a list, got {type(value).__name__}")
    if not isinstance(value, list):
        if isinstance(value, int) and abs(value) > MAX_INTEGER:  # math.isfinite would overflow on it
            raise _invalid(path, f"integer beyond +-2**53 (not exactly a float): {str(value)[:20]}...")
        if not isinstance(value, int | float) or not math.isfinite(value):
            raise _invalid(path, f"expected a finite number, got {value!r}")
        if abs(value) > FLOAT32_MAX:
            raise _invalid(path, f"beyond float32's range (+-{FLOAT32_MAX:.3g}), where the engine reads it: {value!r}")
        return []
    if not value:
        raise _invalid(path, "empty list")
    first = _shape(value[0], f"{path}[0]", depth + 1)
    for i, item in enumerate(value[1:], start=1):
        if _shape(item, f"{path}[{i}]", depth + 1) != first:
            raise _invalid(f"{path}[{i}]", f"ragged: expected shape {first}, like {path}[0]")
    return [len(value), *first]


def parse(body: Any) -> tuple[dict[str, Any], dict[str, Any] | None, BatchShape]:
    """Validate an upload ``{"x": [[...], ...], "y": [...]?}``; returns (x, y, shape) or raises
    :class:`InvalidBatch` naming the JSON path at fault (the API answers 422)."""
    if not isinstance(body, dict):
        raise _invalid("$", "expected an object with 'x' (inputs) and optionally 'y' (labels)")
    unknown = sorted(set(body) - {"x", "y"})
    if unknown:
        raise _invalid(json_key("", unknown[0]), "unknown field; a batch has 'x' and optionally 'y'")
    if "x" not in body:
        raise _invalid("x", "required: the inputs, a list of N samples of the spec's input_shape")
    array = _as_array(body["x"])
    shape = _shape(body["x"], "x", array=array)
    if len(shape) < 2:
        raise _invalid("x", f"expected [N, *input_shape] with N >= 2, got shape {shape}")
    if len(shape) not in X_RANKS:
        raise _invalid(
            "x",
            f"samples of shape {shape[1:]} fit no spec: an input_shape is [D] (vectors) or [C, H, W] (images), so x "
            "is [N, D] or [N, C, H, W]",
        )
    if not 2 <= shape[0] <= MAX_ROWS:
        raise _invalid("x", f"expected 2 to {MAX_ROWS} samples, got {shape[0]}")
    if math.prod(shape) > MAX_VALUES:
        raise _invalid("x", f"{math.prod(shape)} numbers exceed the limit of {MAX_VALUES}")
    distinct = _first_distinct(body["x"] if array is None else array)
    if distinct is None:
        raise _invalid(
            "x",
            f"all {shape[0]} samples are the same: a network cannot tell them apart, so nothing can be tuned or probed",
        )
    y, labels = body.get("y"), None
    if y is not None:
        y_shape = _shape(y, "y")
        if not y_shape or y_shape[0] != shape[0]:
            raise _invalid("y", f"expected one label per sample ({shape[0]}), got shape {y_shape}")
        flat = _flatten(y)
        meta: BatchShape = {"y": y_shape}
        if all(isinstance(v, int) for v in flat):
            if len(y_shape) != 1 or min(flat) < 0:
                raise _invalid("y", "class labels must be one non-negative integer per sample")
            labels = "class"
            meta |= _class_meta(flat)
        else:
            labels = "float"
            if len(y_shape) == 1 and _class_ids(flat):
                meta["whole_floats"] = True
        return {"values": body["x"]}, {"values": y}, {"x": shape, "labels": labels, "first_distinct": distinct} | meta
    return {"values": body["x"]}, None, {"x": shape, "labels": None, "first_distinct": distinct}


def _class_ids(flat: list[Any]) -> bool:
    """Whether float labels read as class ids where the engine reads them (float32): whole numbers
    from 0 to 2**16 (large whole targets are more likely amounts than classes)."""
    values = np.asarray(flat, dtype=np.float32)
    return bool(((values >= 0) & (values < 2**16) & (values == np.round(values))).all())


def _class_meta(flat: list[int]) -> BatchShape:
    """What the warnings on class labels read (``label_warnings``): the classes a network needs
    logits for, how many occur, and the balance of the whole batch and of the samples a job takes
    at the default batch_size."""
    meta: BatchShape = {"classes": max(flat) + 1, "present": len(set(flat))}
    if meta["classes"] >= 2:
        meta["balance"] = label_balance(flat, meta["classes"])
        if len(flat) > DEFAULT_BATCH_SIZE:
            meta["head_balance"] = label_balance(flat[:DEFAULT_BATCH_SIZE], meta["classes"])
    return meta


def _first_distinct(x: list[Any] | np.ndarray) -> int | None:
    """The index of the first sample that differs from sample 0 in float32, where the engine reads
    them; None when all are the same (the engine refuses such a batch too, over the samples a job
    conditions on: ``worker.engine.inputs``)."""
    array = np.asarray(x, dtype=np.float32)
    same = (array == array[0]).reshape(len(array), -1).all(axis=1)
    return None if bool(same.all()) else int(np.argmin(same))


def check_batch_size(shape: BatchShape, batch_size: int) -> None:
    """Raise :class:`InvalidBatch` at ``options.batch_size`` when the first ``batch_size`` samples,
    the ones a job conditions on, are all the same (batches stored before ``first_distinct`` pass)."""
    distinct = shape.get("first_distinct")
    if distinct is not None and batch_size <= distinct:
        raise _invalid(
            "options.batch_size",
            f"the data batch's first {distinct} samples are all the same, so batch_size {batch_size} conditions on "
            f"identical samples; use a batch_size above {distinct}, or shuffle the batch",
        )


def _flatten(value: Any) -> list[Any]:
    return [v for item in value for v in _flatten(item)] if isinstance(value, list) else [value]


def batch_id(x: dict[str, Any], y: dict[str, Any] | None, labels: str | None) -> str:
    """SHA-256 of the content as the engine reads it: x in float32; y as class labels (int64) or
    float targets (float32); their shapes and the labels' kind. So ``1`` and ``1.0``, ``-0.0`` and
    ``0.0``, a float64 array and its float32 rounding are one batch, one id and one cached job,
    while class labels and the same numbers as float targets are two. (Batches stored before
    this keep the id of their raw JSON; their content uploaded again is stored under this one.)"""
    parts = [_canonical(x["values"], np.float32)]
    if y is not None:
        parts.append(_canonical(y["values"], np.int64 if labels == "class" else np.float32))
    header = json.dumps({"v": 2, "labels": labels, "shapes": [list(part.shape) for part in parts]})
    digest = hashlib.sha256(header.encode())
    for part in parts:
        digest.update(part.tobytes())
    return digest.hexdigest()


def is_batch_id(value: object) -> bool:
    """Whether ``value`` can name a batch: a SHA-256 hex digest as :func:`batch_id` writes it (64
    lowercase hex digits). Anything else names none, and is answered without a query."""
    return isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef" for c in value)


def _canonical(values: Any, dtype: type[np.generic]) -> np.ndarray:
    """``values`` in ``dtype``, little-endian, with -0.0 read as 0.0 (IEEE: -0.0 + 0.0 is 0.0)."""
    array = np.asarray(values, dtype=dtype)
    if array.dtype.kind == "f":
        array = array + array.dtype.type(0)
    return np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<"))


def store(
    session: Session,
    x: dict[str, Any],
    y: dict[str, Any] | None,
    shape: BatchShape,
    *,
    owner_id: int = ANONYMOUS_OWNER,
    quota: int = 0,
) -> tuple[str, bool]:
    """Insert the batch unless its id exists, and make it the owner's; returns (id, created: new
    to this owner). Two clients uploading the same content at once both get the one row: the
    loser of the insert race reads the winner's. ``quota`` (0: none): raise BatchQuotaReached,
    storing nothing, when the owner holds that many batches and this content is new to it, whether
    or not another owner stored it (the answer must not tell). Concurrent uploads of one owner can
    pass it by what they carry."""
    key = batch_id(x, y, shape["labels"])
    if quota and _holds_at_least(session, owner_id, quota, unless=key):
        raise BatchQuotaReached(quota)
    _stored(session, key, x, y, shape)
    now = datetime.now(UTC).replace(tzinfo=None)
    link = insert_ignoring_duplicates(session, DataBatchOwner, ["batch_id", "owner_id"])
    result = session.execute(
        link.returning(DataBatchOwner.owner_id), {"batch_id": key, "owner_id": owner_id, "created_at": now}
    )
    return key, result.first() is not None


def _holds_at_least(session: Session, owner_id: int, count: int, *, unless: str) -> bool:
    """Whether the owner holds ``count`` batches or more, and not the batch ``unless``."""
    if session.scalar(_hold(unless, owner_id)) is not None:
        return False
    mine = select(DataBatchOwner.batch_id).where(DataBatchOwner.owner_id == owner_id)
    return (session.scalar(select(func.count()).select_from(mine.limit(count).subquery())) or 0) >= count


def _hold(key: str, owner_id: int) -> Select[str]:
    """The owner's hold on the batch ``key``: a row when it holds it."""
    return select(DataBatchOwner.batch_id).where(DataBatchOwner.batch_id == key, DataBatchOwner.owner_id == owner_id)


_STORE_TRIES = 5  # each try that finds no row and loses the insert waits for another upload's commit


def _stored(session: Session, key: str, x: dict[str, Any], y: dict[str, Any] | None, shape: BatchShape) -> None:
    """Make sure the content is stored under ``key``, and keep it there until this transaction ends.

    The row is read FOR KEY SHARE (PostgreSQL; SQLite serializes writers), by its id and shape
    only (the content is up to 2**20 numbers): a release that would delete it waits for this
    upload's hold, or went first and the content is inserted anew. An insert that loses the race
    to another upload reads the winner's row the same way, and inserts again if a release has
    taken it since."""
    found = select(DataBatch.shape).where(DataBatch.id == key).with_for_update(key_share=True)
    for _ in range(_STORE_TRIES):
        stored = session.execute(found).first()
        if stored is not None:
            if stored.shape != shape:  # stored before the shape kept the labels' "y" and "classes"
                session.execute(update(DataBatch).where(DataBatch.id == key).values(shape=shape))
            return
        try:
            with session.begin_nested():
                session.execute(
                    insert(DataBatch).values(
                        id=key, shape=shape, x=x, y=y, created_at=datetime.now(UTC).replace(tzinfo=None)
                    )
                )
            return
        except IntegrityError:
            continue  # another upload inserted it first: read its row
    raise RuntimeError(f"data batch {key}: stored and deleted by others {_STORE_TRIES} times while uploading")


def shape_of(bind: Session | Connection, key: str, caller: Caller = ANONYMOUS) -> BatchShape | None:
    """The batch's shape (None: no such batch that the caller may see: one another owner uploaded
    is as absent as one never uploaded), in a session or on a plain connection."""
    query = select(DataBatch.shape).where(DataBatch.id == key)
    if not caller.admin:
        query = query.where(_hold(key, caller.owner_id).exists())
    return bind.execute(query).scalar_one_or_none()


def held(
    bind: Session | Connection, caller: Caller = ANONYMOUS, *, limit: int, after: str | None = None
) -> list[tuple[str, BatchShape]]:
    """The (id, shape) of the batches the caller holds (an admin: every stored batch), in the order
    of their ids, from the first id above ``after``: the ids are content hashes, so a page resumes
    where the last ended without a cursor that says anything of other owners' batches."""
    query = select(DataBatch.id, DataBatch.shape).order_by(DataBatch.id).limit(limit)
    if not caller.admin:
        query = query.join(DataBatchOwner, DataBatchOwner.batch_id == DataBatch.id).where(
            DataBatchOwner.owner_id == caller.owner_id
        )
    if after is not None:
        query = query.where(DataBatch.id > after)
    return [(key, shape) for key, shape in bind.execute(query)]


def release(session: Session, key: str, caller: Caller = ANONYMOUS) -> bool:
    """Remove the caller's hold on the batch (an admin's: every owner's), and its content once no
    owner holds it and no queued or running job names it. False: the caller holds no such batch
    (an admin: none is stored). Raises :class:`BatchInUse`, changing nothing, while queued or
    running submissions of the caller (an admin: anyone's) name it, since their jobs would fail.

    The content row is locked (PostgreSQL), so two owners letting go at once cannot each see the
    other's hold and both leave the content behind."""
    holds = delete(DataBatchOwner).where(DataBatchOwner.batch_id == key)
    if not caller.admin:
        mine = _hold(key, caller.owner_id)
        # checked before the lock too: another token's batch is answered as absent at once, not
        # after waiting on that token's upload, as an id never stored is
        if session.scalar(mine) is None:
            return False
        holds = holds.where(DataBatchOwner.owner_id == caller.owner_id)
    locked = select(DataBatch.id).where(DataBatch.id == key).with_for_update()  # its id only: not the content
    if session.scalar(locked) is None or (not caller.admin and session.scalar(mine) is None):
        return False  # gone, or let go of by a concurrent delete of the caller's
    waiting = _unfinished_naming(session, key, None if caller.admin else caller.owner_id)
    if waiting:
        raise BatchInUse(waiting)
    session.execute(holds)
    left = select(DataBatchOwner.owner_id).where(DataBatchOwner.batch_id == key).limit(1)
    if session.scalar(left) is None and not _unfinished_naming(session, key, None):
        session.execute(delete(DataBatch).where(DataBatch.id == key))
    return True


def _unfinished_naming(session: Session, key: str, owner_id: int | None) -> int:
    """How many queued or running jobs name the batch in their option ``data`` (``owner_id``: only
    the submissions of that owner it has not cancelled)."""
    query = (
        select(func.count())
        .select_from(Candidate)
        .where(Candidate.status.in_([Status.QUEUED, Status.RUNNING]), Candidate.options[DATA].as_string() == key)
    )
    if owner_id is not None:
        query = query.join(OwnedCandidate, OwnedCandidate.candidate_id == Candidate.id).where(
            OwnedCandidate.owner_id == owner_id, OwnedCandidate.cancelled_at.is_(None)
        )
    return int(session.scalar(query) or 0)


def load(session: Session, key: str) -> dict[str, Any] | None:
    """What ``worker.engine.condition`` takes as ``data``: ``{"x": ..., "y": ...}`` (None: no such batch)."""
    row = session.get(DataBatch, key)
    if row is None:
        return None
    data: dict[str, Any] = {"x": row.x["values"]}
    if row.y is not None:
        data["y"] = row.y["values"]
    return data


def check_fits(shape: BatchShape, spec: ArchitectureSpec, field: str) -> None:
    """Raise :class:`InvalidBatch` naming the spec's field at fault unless the batch's samples have its input shape
    and its labels fit the network's output (class labels below the number of logits, float
    targets as many per sample as outputs)."""
    if list(shape["x"][1:]) != list(spec.input_shape):
        raise _invalid(
            f"{field}.input_shape",
            f"the data batch's samples have shape {shape['x'][1:]}, but the spec's input_shape is "
            f"{list(spec.input_shape)}",
        )
    if shape.get("labels") is None:
        return
    if shape["labels"] == "float" and "y" not in shape:
        return  # stored before the shape kept the labels' "y": nothing to check against
    classes = shape.get("classes")
    error = target_error(
        shape["labels"],
        shape["y"][1:] if "y" in shape else [],
        trace_shapes(spec).boundaries[-1],
        None if classes is None else (0, classes - 1),
        subject="the data batch's 'y'",
    )
    if error is not None:
        if shape.get("whole_floats"):
            error += " (the labels arrived as floats such as 1.0; class labels are integers)"
        raise _invalid(f"{field}.blocks[{len(spec.blocks) - 1}]", error)


def label_warnings(shape: BatchShape) -> list[str]:
    """What the batch's labels will make a report read wrong (the batch is stored all the same):
    one class only, imbalanced classes over the batch or over the samples a job takes at the
    default batch_size, whole numbers sent as floats."""
    if shape.get("whole_floats"):
        return [whole_floats_warning()]
    classes, balance = shape.get("classes"), shape.get("balance")
    if classes is None:
        return []
    if shape.get("present") == 1:
        return [one_class_warning(classes - 1)]
    if balance is None:
        return []
    overall = imbalance_warning(balance, classes, present=shape.get("present"))
    if overall is not None:
        return [overall]
    head = shape.get("head_balance")
    warning = None if head is None else head_imbalance_warning(head, classes, DEFAULT_BATCH_SIZE)
    return [] if warning is None else [warning]
