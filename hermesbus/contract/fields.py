"""Field types shared by the envelope and payload models (Avro ranges, millisecond time)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated, ClassVar, Final

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field

__all__ = [
    "EPOCH",
    "FLOW_ID_RULE",
    "Double",
    "Int32",
    "Int64",
    "Millis",
    "NonEmpty",
    "Record",
    "epoch_ms",
    "from_epoch_ms",
    "to_millis_datetime",
]

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
Int32 = Annotated[int, Field(ge=-(2**31), le=2**31 - 1)]
FLOW_ID_RULE: Final = r"^[a-z][a-z0-9_]{1,39}$"
"""A flow's id in the flow registry (``expense``, ``table_export``)."""
Int64 = Annotated[int, Field(ge=-(2**63), le=2**63 - 1)]
Double = Annotated[float, Field(allow_inf_nan=False)]
NonEmpty = Annotated[str, Field(min_length=1)]


def epoch_ms(moment: datetime) -> int:
    """Whole milliseconds since the epoch: how stores and timers keep envelope times."""
    return (moment - EPOCH) // timedelta(milliseconds=1)


def from_epoch_ms(ms: int) -> datetime:
    """The aware UTC time of ``ms`` milliseconds since the epoch (inverse of :func:`epoch_ms`)."""
    return EPOCH + timedelta(milliseconds=ms)


def _epoch_millis(value: object) -> object:
    """Integers are epoch milliseconds, as in Avro's timestamp-millis and the protocol's JSON."""
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            return EPOCH + timedelta(milliseconds=value)
        except OverflowError:
            raise ValueError(f"{value} ms since the epoch is outside years 1-9999") from None
    return value


def to_millis_datetime(value: datetime) -> datetime:
    """Aware UTC datetime truncated to whole milliseconds, as Avro timestamp-millis keeps it."""
    if value.tzinfo is UTC and not value.microsecond % 1000:
        return value  # the common case: already what Avro keeps (fastavro returns these)
    if value.tzinfo is None:
        raise ValueError("timestamp must be timezone-aware (UTC)")
    try:
        value = value.astimezone(UTC)
    except OverflowError:
        raise ValueError("timestamp in UTC is outside years 1-9999") from None
    return value.replace(microsecond=value.microsecond - value.microsecond % 1000)


Millis = Annotated[datetime, BeforeValidator(_epoch_millis), AfterValidator(to_millis_datetime)]
"""An aware UTC point in time truncated to milliseconds; integers are epoch milliseconds."""


class Record(BaseModel):
    """Base of every model that mirrors an Avro record: immutable, no unknown fields."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    avro_name: ClassVar[str]
    """Full name of the Avro record the model mirrors."""
