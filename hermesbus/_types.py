"""Field types shared by the envelope and payload models (Avro ranges, millisecond time)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field

__all__ = ["EPOCH", "Double", "Int32", "Int64", "Millis", "NonEmpty", "Record", "to_millis_datetime"]

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
Int32 = Annotated[int, Field(ge=-(2**31), le=2**31 - 1)]
Int64 = Annotated[int, Field(ge=-(2**63), le=2**63 - 1)]
Double = Annotated[float, Field(allow_inf_nan=False)]
NonEmpty = Annotated[str, Field(min_length=1)]


def _from_epoch_millis(value: object) -> object:
    if isinstance(value, int) and not isinstance(value, bool):
        return EPOCH + timedelta(milliseconds=value)
    return value


def to_millis_datetime(value: datetime) -> datetime:
    """Aware UTC datetime truncated to whole milliseconds, as Avro timestamp-millis keeps it."""
    if value.tzinfo is None:
        raise ValueError("timestamp must be timezone-aware (UTC)")
    value = value.astimezone(UTC)
    return value.replace(microsecond=value.microsecond - value.microsecond % 1000)


Millis = Annotated[
    datetime, BeforeValidator(_from_epoch_millis), AfterValidator(to_millis_datetime)
]
"""A point in time with millisecond precision; epoch milliseconds are accepted."""


class Record(BaseModel):
    """Base of every model that mirrors an Avro record: immutable, no unknown fields."""

    model_config = ConfigDict(frozen=True, extra="forbid")
