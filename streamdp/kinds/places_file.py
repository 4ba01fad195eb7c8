"""A public geography (or any hierarchy of places) read from a CSV file the spec names.

The file has a header row with the columns ``node`` and ``parent`` (and optionally ``label``;
other columns are ignored, one looking like a misspelt ``label`` is refused), then one row per
place: its identifier, its parent's identifier (empty for the one root) and a
label for readers. Identifiers follow the configuration's name rule (they appear in event
records and counter names). The rows may come in any order; the places are numbered
breadth-first (root first, then every level in turn, children in file order), which is the
layout of a :class:`~streamdp.consistency.tree.Tree`.

The file is public data (it names places, never people), but it decides which counters exist:
its SHA-256 is part of the configuration's fingerprint, so a snapshot refuses to restore under
an edited file, and a spec may pin it (``places_sha256``).
"""

from __future__ import annotations

import csv
import difflib
import hashlib
import io
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np

from streamdp.consistency.tree import IntArray, Tree
from streamdp.engine.config_reader import NAME_PATTERN, NAME_RULE
from streamdp.errors import ConfigError

#: Most places in one file (each is at least one counter of its stream).
MAX_PLACES = 10_000_000
_LABEL_LIMIT = 200


@dataclass(frozen=True, eq=False)
class Places:
    """A hierarchy of places in breadth-first order.

    Attributes:
        ids: place identifiers, root first (breadth-first order).
        labels: each place's label for readers (its identifier when the file gives none).
        tree: the parent array (:class:`~streamdp.consistency.tree.Tree`).
        path: the file as the spec names it.
        sha256: hex SHA-256 of the file's bytes (equality and hashing go by it).
    """

    ids: tuple[str, ...]
    labels: tuple[str, ...]
    tree: Tree
    path: str
    sha256: str

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Places) and other.sha256 == self.sha256

    def __hash__(self) -> int:
        return hash(self.sha256)

    @property
    def size(self) -> int:
        return len(self.ids)

    @cached_property
    def depth(self) -> IntArray:
        """Each place's depth (root 0), shape (places,)."""
        return self.tree.depth

    @property
    def levels(self) -> int:
        """Number of levels (the root's level included): the most places one leaf's path
        from the root holds, so the most counters (per cell) one event adds to."""
        return len(self.tree.level_bounds)

    def inner_ids(self) -> frozenset[str]:
        """The identifiers of the places with places under them (records name leaves)."""
        is_leaf = np.zeros(self.size, dtype=bool)
        is_leaf[self.tree.leaves] = True
        return frozenset(self.ids[i] for i in np.flatnonzero(~is_leaf).tolist())

    def leaf_paths(self) -> Mapping[str, tuple[int, ...]]:
        """Every leaf's identifier -> the indices of the places on its path, root first."""
        tree = self.tree
        out: dict[str, tuple[int, ...]] = {}
        for leaf in tree.leaves.tolist():
            path = [leaf]
            node = leaf
            while node > 0:
                node = int(tree.parent[node])
                path.append(node)
            out[self.ids[leaf]] = tuple(reversed(path))
        return out


def resolve_places_path(origin: str, written: str) -> Path:
    """Where the file ``written`` in a spec read from ``origin`` is: relative paths are taken
    from the spec file's folder (from the working directory when the spec is not a file)."""
    path = Path(written)
    if path.is_absolute():
        return path
    spec_file = Path(origin)
    if spec_file.is_file():
        return spec_file.parent / path
    return path


def read_places(file: Path, written: str) -> Places:
    """Read and check a places file (see the module docstring); :class:`ConfigError` naming
    the file, the row and what to fix."""
    try:
        data = file.read_bytes()
    except OSError as error:
        raise ConfigError(f"cannot read places file {str(file)!r}: {error.strerror}") from None
    return parse_places(data, written)


def _records(reader: Iterator[list[str]], written: str) -> Iterator[list[str]]:
    """The csv ``reader``'s records; the csv module's own errors (a field over its size
    limit, a stray quote) as :class:`ConfigError` naming the file and the line."""
    while True:
        try:
            record = next(reader)
        except StopIteration:
            return
        except csv.Error as error:
            line = getattr(reader, "line_num", "?")
            raise ConfigError(f"places file {written!r}: row {line}: {error}") from None
        yield record


def _near_label(column: str) -> bool:
    """A column named like ``label`` but not exactly (``Label``, ``lable``, ``labels``)."""
    similarity = difflib.SequenceMatcher(None, column.lower(), "label").ratio()
    return column != "label" and similarity >= 0.8


def parse_places(data: bytes, written: str) -> Places:
    """A places file's bytes as :class:`Places` (see :func:`read_places`)."""
    digest = hashlib.sha256(data).hexdigest()
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise ConfigError(f"places file {written!r}: not UTF-8 text") from None
    # newline="": the csv reader splits the lines itself (LF, CRLF or CR alone)
    rows = _records(csv.reader(io.StringIO(text, newline="")), written)
    header = [h.strip() for h in next(rows, [])]
    if "node" not in header or "parent" not in header:
        raise ConfigError(
            f"places file {written!r}: the first row must name the columns node,parent "
            f"(and optionally label); got {','.join(header)!r}"
        )
    repeated = sorted({h for h in header if header.count(h) > 1})
    if repeated:
        raise ConfigError(
            f"places file {written!r}: the first row names {', '.join(map(repr, repeated))} "
            "more than once; name each column once"
        )
    if "label" not in header:
        near = [h for h in header if _near_label(h)]
        if near:
            raise ConfigError(
                f"places file {written!r}: column {near[0]!r} looks like a misspelt 'label' "
                "(other columns are ignored, so every place would be shown by its identifier); "
                "name it label"
            )
    at_node, at_parent = header.index("node"), header.index("parent")
    at_label = header.index("label") if "label" in header else None
    ids: list[str] = []
    parents: list[str] = []
    labels: list[str] = []
    seen: dict[str, int] = {}
    for line, row in enumerate(rows, start=2):
        if not row or all(not cell.strip() for cell in row):
            continue
        if any("\n" in cell or "\r" in cell for cell in row):
            raise ConfigError(
                f"places file {written!r}: row {line} holds a line break inside a field; is a "
                'quote left open? (close every quoted label: "Smith, County")'
            )
        if len(row) != len(header):
            raise ConfigError(
                f"places file {written!r}: row {line} has {len(row)} columns, the header "
                f'{len(header)} (quote a label that holds a comma: "Smith, County")'
            )
        node, parent = row[at_node].strip(), row[at_parent].strip()
        if not NAME_PATTERN.match(node):
            raise ConfigError(
                f"places file {written!r}: row {line}: node {node!r} is not a name of {NAME_RULE}"
            )
        if node in seen:
            raise ConfigError(
                f"places file {written!r}: row {line}: node {node!r} is already on row "
                f"{seen[node]}; identifiers must be unique"
            )
        seen[node] = line
        label = row[at_label].strip() if at_label is not None else ""
        if len(label) > _LABEL_LIMIT:
            raise ConfigError(
                f"places file {written!r}: row {line}: the label has {len(label)} characters; "
                f"at most {_LABEL_LIMIT}"
            )
        ids.append(node)
        parents.append(parent)
        labels.append(label or node)
        if len(ids) > MAX_PLACES:
            raise ConfigError(f"places file {written!r}: more than {MAX_PLACES} places")
    roots = [i for i, p in enumerate(parents) if not p]
    if len(roots) != 1:
        named = ", ".join(repr(ids[i]) for i in roots[:5])
        raise ConfigError(
            f"places file {written!r}: needs exactly one root (a row with an empty parent); "
            f"found {len(roots)}{': ' + named if roots else ''}"
        )
    if len(ids) < 2:
        raise ConfigError(f"places file {written!r}: needs a root and at least one place under it")
    children: dict[str, list[int]] = {}
    for i, parent in enumerate(parents):
        if not parent:
            continue
        if parent not in seen:
            raise ConfigError(
                f"places file {written!r}: row {seen[ids[i]]}: parent {parent!r} of "
                f"{ids[i]!r} is not a node of the file"
            )
        children.setdefault(parent, []).append(i)
    # breadth-first numbering from the root; a place never reached sits on a cycle
    order = [roots[0]]
    parent_index = [-1]
    head = 0
    while head < len(order):
        for child in children.get(ids[order[head]], ()):
            order.append(child)
            parent_index.append(head)
        head += 1
    if len(order) != len(ids):
        reached = set(order)
        stray = next(i for i in range(len(ids)) if i not in reached)
        raise ConfigError(
            f"places file {written!r}: row {seen[ids[stray]]}: {ids[stray]!r} is not under the "
            "root (its parents form a cycle)"
        )
    tree = Tree(np.asarray(parent_index, dtype=np.int64))
    return Places(
        ids=tuple(ids[i] for i in order),
        labels=tuple(labels[i] for i in order),
        tree=tree,
        path=written,
        sha256=digest,
    )
