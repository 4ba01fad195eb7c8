"""Counter name -> value for a contiguous range of a stream's counters, as a read-only view
over the stream's names and one row of a numpy array (a consistent record's ``counts``,
``totals``, stds and integer estimates).

A wide stream's revision publishes several periods of millions of counters at once; holding
each part's values as Python dicts costs about 60 bytes per counter per map (measured: 540
bytes per counter for a four-period revision's four maps), the array row 8. The view turns
into a dict only while a record is serialised (:meth:`CounterValues.as_dict`), with the same
Python numbers ``ndarray.tolist`` gives, so the JSON is byte for byte what a dict gives.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, TypeVar

import numpy.typing as npt

V = TypeVar("V", float, int)


class CounterValues(Mapping[str, V]):
    """``names[lo:hi]`` -> ``values[lo:hi]`` (``values`` one-dimensional, float64 or int64,
    never modified after the view is made)."""

    __slots__ = ("_hi", "_index", "_lo", "_names", "_values")

    def __init__(
        self, names: tuple[str, ...], values: npt.NDArray[Any], lo: int = 0, hi: int | None = None
    ) -> None:
        stop = len(names) if hi is None else hi
        if values.ndim != 1 or values.shape[0] != len(names) or not 0 <= lo <= stop <= len(names):
            raise ValueError(
                f"values of shape {values.shape} for {len(names)} names, range {lo}..{stop}"
            )
        self._names = names
        self._values = values
        self._lo = lo
        self._hi = stop
        self._index: dict[str, int] | None = None

    def __len__(self) -> int:
        return self._hi - self._lo

    def __iter__(self) -> Iterator[str]:
        return iter(self._names[self._lo : self._hi])

    def __getitem__(self, name: str) -> V:
        if self._index is None:  # built on the first lookup by name, for this view only
            self._index = {n: i for i, n in enumerate(self._names[self._lo : self._hi], self._lo)}
        value: V = self._values[self._index[name]].item()
        return value

    def __contains__(self, name: object) -> bool:
        try:
            self[name]  # type: ignore[index]
        except (KeyError, TypeError):
            return False
        return True

    def as_dict(self) -> dict[str, V]:
        """The plain dict (what JSON serialises)."""
        values: list[V] = self._values[self._lo : self._hi].tolist()
        return dict(zip(self._names[self._lo : self._hi], values, strict=True))

    def items(self) -> Any:
        return self.as_dict().items()

    def values(self) -> Any:
        return self._values[self._lo : self._hi].tolist()

    def __repr__(self) -> str:
        first = self._names[self._lo] if len(self) else None
        return f"CounterValues({len(self)} counters from {first!r})"


def plain(values: Mapping[str, V]) -> dict[str, V]:
    """``values`` as a dict (a :class:`CounterValues` converted, a dict as it is)."""
    if isinstance(values, CounterValues):
        return values.as_dict()
    return values if isinstance(values, dict) else dict(values)
