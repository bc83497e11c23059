"""Checks of the arguments the package's classes take: ints that are ints
(not bools), within range, callables or None."""
from __future__ import annotations

import operator
from typing import Any

def as_int(name: str, value: Any) -> int:
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an int, not bool")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an int, not {type(value).__name__}") from None


def as_u32(name: str, value: Any, low: int = 0, high: int = 2**32 - 1) -> int:
    v = as_int(name, value)
    if not low <= v <= high:
        raise ValueError(f"{name} must be between {low} and {high}, got {v}")
    return v


def callable_or_none(name: str, fn: Any) -> None:
    if fn is not None and not callable(fn):
        raise TypeError(f"{name} must be a callable or None, not {type(fn).__name__}")
