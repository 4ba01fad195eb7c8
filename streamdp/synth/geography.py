"""Synthetic geographies shaped like the seeds' (issue 29): a nation of states of counties, with
heavy-tailed county counts and populations, written as a places file (node,parent,label plus a
``population`` column the synthetic events are drawn with). Never real places.

:func:`synthetic_counties` with its defaults is the committed ``streamdp/examples/counties.csv``
(a test regenerates it and compares): 50 states, 3,143 counties (as many as the United States
has), between 3 and 254 counties per state.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass

import numpy as np

#: Counties per state are drawn between these (Delaware has 3, Texas 254).
FEWEST_COUNTIES = 3
MOST_COUNTIES = 254


@dataclass(frozen=True)
class Place:
    """One row of a places file."""

    node: str
    parent: str
    label: str
    population: int


def synthetic_counties(states: int = 50, counties: int = 3143, seed: int = 29) -> list[Place]:
    """A nation (``US``) of ``states`` states (``S01``...) of ``counties`` counties in all
    (``S01-C001``...), breadth-first. County counts per state are log-normal, clipped to
    [3, 254] and adjusted to sum to ``counties``; county populations are log-normal (median
    ~25,000, a long upper tail), states' and the nation's are their sums."""
    if states < 1 or counties < states * FEWEST_COUNTIES:
        raise ValueError(f"need states >= 1 and counties >= {FEWEST_COUNTIES} per state")
    rng = np.random.default_rng(seed)
    share = rng.lognormal(mean=0.0, sigma=0.8, size=states)
    sizes = np.clip(
        np.round(share / share.sum() * counties), FEWEST_COUNTIES, MOST_COUNTIES
    ).astype(np.int64)
    # adjust one county at a time, largest (or smallest) states first, to hit the total
    while int(sizes.sum()) != counties:
        step = 1 if sizes.sum() < counties else -1
        room = sizes < MOST_COUNTIES if step > 0 else sizes > FEWEST_COUNTIES
        order = np.argsort(-share if step > 0 else share, kind="stable")
        pick = next(int(i) for i in order if room[i])
        sizes[pick] += step
    people = [
        np.maximum(100, np.round(rng.lognormal(10.1, 1.2, size=int(n)))).astype(np.int64)
        for n in sizes
    ]
    rows = [Place("US", "", "Nation", int(sum(int(p.sum()) for p in people)))]
    rows.extend(
        Place(f"S{s + 1:02d}", "US", f"State {s + 1:02d}", int(people[s].sum()))
        for s in range(states)
    )
    for s in range(states):
        for c, population in enumerate(people[s].tolist()):
            node = f"S{s + 1:02d}-C{c + 1:03d}"
            rows.append(
                Place(node, f"S{s + 1:02d}", f"County {c + 1:03d}, State {s + 1:02d}", population)
            )
    return rows


def places_csv(rows: list[Place]) -> str:
    """The rows as a places file (header ``node,parent,label,population``)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["node", "parent", "label", "population"])
    for row in rows:
        writer.writerow([row.node, row.parent, row.label, row.population])
    return out.getvalue()
