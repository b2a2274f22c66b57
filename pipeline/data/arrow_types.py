"""Which Arrow types pcqr reads, and as what: the one table every command consults.

A feature column is read as float64 (:func:`as_float64`), whatever its stored type; a label column
as 0/1 (int8); a query id column as int64. :data:`TYPES` says, for each family of Arrow types,
what a column of it becomes in each role, and where precision is lost. The driver decides from
metadata only (:func:`feature_refusal`, :func:`label_refusal`, :func:`id_refusal`), before
anything is charged; the workers convert the values with the same table (:func:`as_float64`) and
refuse nulls, NaN and infinities there. docs/api.md prints this table (tests/test_arrow_types.py
checks that it does).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

#: float64's largest finite value is about 1.8e308: a decimal with more integer digits may not fit.
FLOAT64_DIGITS = 308


@dataclass(frozen=True)
class ArrowFamily:
    """One row of the table: a family of Arrow types and what a column of it becomes as a feature,
    a label and a query id (``None``: refused in that role)."""

    name: str
    member: Callable[[pa.DataType], bool]
    feature: str | None
    label: str | None
    query_id: str | None


def _small_integer(kind: pa.DataType) -> bool:
    return pa.types.is_integer(kind) and kind.bit_width < 64


def _wide_integer(kind: pa.DataType) -> bool:
    return pa.types.is_integer(kind) and kind.bit_width == 64


TYPES: tuple[ArrowFamily, ...] = (
    ArrowFamily("bool", pa.types.is_boolean, "0.0 or 1.0 (exact)", "as is", None),
    ArrowFamily("int8, int16, int32, uint8, uint16, uint32", _small_integer, "float64 (exact)",
                "values must be 0 or 1", "int64 (exact)"),
    ArrowFamily("int64, uint64", _wide_integer,
                "float64: exact up to 2^53 in magnitude, rounded to the nearest float64 beyond",
                "values must be 0 or 1", "int64; a uint64 id above 2^63 - 1 is refused where it is read"),
    ArrowFamily("float16, float32, float64", pa.types.is_floating, "float64 (exact)",
                "values must be 0.0 or 1.0", None),
    ArrowFamily("decimal32, decimal64, decimal128, decimal256", pa.types.is_decimal,
                "float64 by pyarrow's cast: the nearest float64, so digits beyond the 15th to 17th "
                f"are rounded; a type with more than {FLOAT64_DIGITS} integer digits is refused", None, None),
    ArrowFamily("dictionary of any type above", lambda kind: pa.types.is_dictionary(kind),
                "decoded, then as its value type", "decoded, then as its value type", None),
)

#: What the table refuses, in words (for the docs and the one-line errors).
REFUSED = ("timestamp, date, time, duration, interval, string, binary (every width and view), list, "
           "struct, map, union, null, extension types, and a dictionary of any of these")


def family(kind: pa.DataType) -> ArrowFamily | None:
    """The row of :data:`TYPES` an Arrow type belongs to (None: refused in every role). A dictionary
    belongs to its row only when its value type is in the table."""
    if pa.types.is_dictionary(kind) and family(kind.value_type) is None:
        return None
    return next((row for row in TYPES if row.member(kind)), None)


def _value_type(kind: pa.DataType) -> pa.DataType:
    return kind.value_type if pa.types.is_dictionary(kind) else kind


def feature_refusal(kind: pa.DataType) -> str | None:
    """Why a column of this type cannot be a feature (None: it can)."""
    row = family(kind)
    if row is None or row.feature is None:
        return f"is {kind}, not a number pcqr can use as a feature"
    value = _value_type(kind)
    if pa.types.is_decimal(value) and value.precision - value.scale > FLOAT64_DIGITS:
        return f"is {kind}: its values may exceed float64's range (about 1.8e308)"
    return None


def label_refusal(kind: pa.DataType) -> str | None:
    """Why a column of this type cannot be the label (None: it can; its values are checked where read)."""
    row = family(_value_type(kind))
    if row is None or row.label is None:
        return f"is {kind}, expected 0/1 integers (or bool)"
    return None


def id_refusal(kind: pa.DataType) -> str | None:
    """Why a column of this type cannot hold query ids (None: it can)."""
    row = family(kind)
    if row is None or row.query_id is None:
        return f"is {kind}, expected integer query ids"
    return None


def integer_by_type(kind: pa.DataType) -> bool:
    """Whether every value a column of this type holds is an integer (integers, bool, a decimal of
    scale 0, a dictionary of these): a float column may hold any value, so its values are checked."""
    value = _value_type(kind)
    return bool(pa.types.is_integer(value) or pa.types.is_boolean(value)
                or (pa.types.is_decimal(value) and value.scale <= 0))


def as_float64(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """A feature (or label) column's values as float64, by the table: a dictionary decoded, every
    other accepted type cast by pyarrow (an integer beyond 2^53 or a long decimal rounded to the
    nearest float64, as :data:`TYPES` says); a null becomes NaN. The caller checked the type."""
    if pa.types.is_dictionary(column.type):
        column = column.cast(column.type.value_type)
    values = pc.cast(column, pa.float64(), safe=False)
    return np.asarray(values.to_numpy(zero_copy_only=False), dtype=np.float64)
