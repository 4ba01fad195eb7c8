"""Places streams' pieces (issue 29): the places file, the kind's counters and extractor, and the
tree projection against the dense references.

- the places file: breadth-first numbering whatever the row order; every malformed file refused
  with the row and what to fix; the digest pins the content (fingerprint, ``places_sha256``);
- the kind: counter layout and names, an event's contribution (its leaf and every place above,
  in its cell: one per level), refusals (a place with places under it, an unknown place, a
  sensitivity below the number of levels, a dense-projection mechanism at scale);
- the projection: equal to the dense Moore-Penrose projection onto "parent = sum of children"
  per cell, and its per-counter variance factor equal to the dense projector's diagonal; the
  weighted two-pass solve equal to the dense GLS solve with its covariance's diagonal.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from streamdp.consistency.tree import Tree, tree_projection, tree_projection_variances
from streamdp.engine.spec_loading import load_spec, parse_spec
from streamdp.errors import ConfigError
from streamdp.kinds import stream_kind
from streamdp.kinds.places_file import parse_places
from streamdp.papers import dense_projection
from streamdp.synth.geography import places_csv, synthetic_counties
from tests.places_fixture import small_county_spec

EXAMPLES = Path(__file__).resolve().parents[1] / "streamdp" / "examples"

SPEC = """
[sources.admissions]
topic = "admissions"
kind = "person"
epsilon_cap = 1.0

[streams.by-place]
source = "admissions"
epsilon = 1.0
sensitivity = {sensitivity}
horizon = 8
mechanism = "{mechanism}"
period = {{ unit = "day", start = "2024-01-01" }}
constraints = {{ kind = "tree" }}
counters = {{ kind = "places", places = "places.csv", field = "county"{extra} }}
"""

PLACES = "node,parent,label\nUS,,Nation\nA,US,State A\nB,US,State B\nA1,A,\nA2,A,\nB1,B,\n"


def _spec_file(tmp_path: Path, places: str = PLACES, **fields: object) -> Path:
    values = {"sensitivity": 3, "mechanism": "fda", "extra": ""} | fields
    (tmp_path / "places.csv").write_text(places, encoding="utf-8")
    path = tmp_path / "spec.toml"
    path.write_text(SPEC.format(**values), encoding="utf-8")
    return path


def test_places_are_numbered_breadth_first_whatever_the_row_order() -> None:
    shuffled = "node,parent\nA1,A\nB1,B\nB,US\nUS,\nA,US\nA2,A\n"
    places = parse_places(shuffled.encode(), "x.csv")
    assert places.ids == ("US", "B", "A", "B1", "A1", "A2")
    assert places.tree.parent.tolist() == [-1, 0, 0, 1, 2, 2]
    assert places.labels == places.ids  # no label column: the identifiers
    assert places.levels == 3
    assert places.leaf_paths() == {"B1": (0, 1, 3), "A1": (0, 2, 4), "A2": (0, 2, 5)}


def test_old_mac_line_endings_read_like_the_others() -> None:
    text = "node,parent,label\nUS,,Nation\nA,US,Alpha\nB,US,Beta\n"
    expected = parse_places(text.encode(), "x.csv")
    for ending in ("\r", "\r\n"):
        places = parse_places(text.replace("\n", ending).encode(), "x.csv")
        assert (places.ids, places.labels) == (expected.ids, expected.labels)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("id,up\nUS,\n", "must name the columns node,parent"),
        ("node,parent\nUS,\nEU,\nA,US\n", "exactly one root"),
        ("node,parent\nA,US\nB,A\n", "exactly one root"),
        ("node,parent\nUS,\nA,XX\n", "parent 'XX' of 'A' is not a node"),
        ("node,parent\nUS,\nA,US\nA,US\n", "row 4: node 'A' is already on row 3"),
        ("node,parent\nUS,\nA|B,US\n", "is not a name"),
        ("node,parent\nUS,\nA,B\nB,A\n", "form a cycle"),
        ("node,parent\nUS,\n", "at least one place under it"),
        ("node,parent,label\nUS,\n", "row 2 has 2 columns"),
        # an unquoted comma in a label would have cut it ("Smith")
        ("node,parent,label\nUS,,Nation\nA,US,Smith, County\n", "row 3 has 4 columns.*quote"),
        ("node,parent,node\nUS,,X\nA,US,Y\n", "names 'node' more than once"),
        # the csv module's own errors name the file and the row (they were tracebacks)
        ('node,parent,label\nUS,,US\nA,US,"' + "x" * 140_000 + '"\n', "x.csv.*row 3: field larger"),
        # a quote left open swallows the rows after it into one label
        (
            'node,parent,label\nUS,,"Nation\nA,US,Alpha\nB,US,Beta\n',
            "row 2 holds a line break.*quote",
        ),
        (
            'node,parent,label\nUS,,Nation\nA,US,"Alpha\nB,US,Beta\n',
            "row 3 holds a line break.*quote",
        ),
        # a misspelt label column was ignored like any other: every label became the id
        ("node,parent,lable\nUS,,Nation\nA,US,Alpha\n", "'lable' looks like a misspelt 'label'"),
        ("node,parent,Label\nUS,,Nation\nA,US,Alpha\n", "'Label' looks like a misspelt 'label'"),
    ],
)
def test_a_malformed_places_file_is_refused_with_the_row_and_the_fix(
    text: str, message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_places(text.encode(), "x.csv")


def test_the_places_file_is_found_beside_the_spec_and_its_digest_is_in_the_fingerprint(
    tmp_path: Path,
) -> None:
    spec = load_spec(_spec_file(tmp_path))
    stream = spec.streams["by-place"]
    digest = stream.counters.places.sha256 if stream.counters.places else ""
    assert spec.raw["streams"]["by-place"]["counters"]["places_sha256"] == digest
    before = spec.fingerprint()
    # the same spec text over other places: another fingerprint (a snapshot will not restore)
    other = load_spec(_spec_file(tmp_path, PLACES.replace("B1,B,", "B1,B,\nB2,B,")))
    assert other.fingerprint() != before
    # pinned: the digest must match
    pinned = f', places_sha256 = "{digest}"'
    assert load_spec(_spec_file(tmp_path, extra=pinned)).fingerprint() == before
    wrong = ', places_sha256 = "' + "0" * 64 + '"'
    with pytest.raises(ConfigError, match="the places changed"):
        load_spec(_spec_file(tmp_path, PLACES, extra=wrong))
    # a digest in capitals is the same digest; text that is no digest is not "changed places"
    upper = f', places_sha256 = "{digest.upper()}"'
    assert load_spec(_spec_file(tmp_path, extra=upper)).fingerprint() == before
    for bad in ('"abc"', "12", '"' + "g" * 64 + '"'):
        with pytest.raises(ConfigError, match="as 64 hexadecimal digits"):
            load_spec(_spec_file(tmp_path, extra=f", places_sha256 = {bad}"))


def test_other_columns_are_ignored_and_labels_read() -> None:
    places = parse_places(b"node,parent,label,population\nUS,,Nation,10\nA,US,Alpha,4\n", "x.csv")
    assert places.labels == ("Nation", "Alpha")


def test_a_missing_places_file_or_a_small_sensitivity_is_refused(tmp_path: Path) -> None:
    path = _spec_file(tmp_path)
    (tmp_path / "places.csv").unlink()
    with pytest.raises(ConfigError, match="cannot read places file"):
        load_spec(path)
    with pytest.raises(ConfigError, match=r"3 levels .* set sensitivity = 3"):
        load_spec(_spec_file(tmp_path, sensitivity=2))


def test_a_dense_projection_mechanism_is_refused_beyond_its_limit(tmp_path: Path) -> None:
    many = "node,parent\nUS,\n" + "".join(f"C{i},US\n" for i in range(5000))
    with pytest.raises(ConfigError, match="dense 5001 x 5001 matrix"):
        load_spec(_spec_file(tmp_path, many, sensitivity=2, mechanism="kary_gls"))
    # a small places stream may use it
    assert load_spec(_spec_file(tmp_path, mechanism="kary_gls")).streams["by-place"]


def test_counters_are_places_times_cells_and_an_event_adds_one_per_level() -> None:
    spec = small_county_spec()
    stream = next(iter(spec.streams.values()))
    places = stream.counters.places
    assert places is not None
    names = stream.counters.names
    assert len(names) == places.size * 2
    assert names[:4] == ("US/sex=female", "US/sex=male", "S01/sex=female", "S01/sex=male")
    leaf = places.ids[int(places.tree.leaves[-1])]
    state = leaf.split("-")[0]
    event = {"attributes": {"county": leaf, "sex": "male"}}
    hit = stream_kind("places").extractor(stream).contribution(event)
    assert sorted(names[i] for i, _ in hit) == sorted(
        [f"{leaf}/sex=male", f"{state}/sex=male", "US/sex=male"]
    )
    assert all(q == 1 for _, q in hit)
    assert sum(q for _, q in hit) == stream.sensitivity == places.levels


@pytest.mark.parametrize(
    ("attributes", "reason", "message"),
    [
        ({"county": "S01", "sex": "male"}, "unknown_category", "has places under it"),
        ({"county": "S99-C001", "sex": "male"}, "unknown_category", "not a place of"),
        ({"county": ["S01"], "sex": "male"}, "unknown_category", "not a place of"),
        ({"county": {"S01": 1}, "sex": "male"}, "unknown_category", "not a place of"),
        ({"sex": "male"}, "schema_violation", "county: missing"),
        ({"county": "S01-C001"}, "schema_violation", "sex: missing"),
        ({"county": "S01-C001", "sex": "x"}, "unknown_category", "not one of the categories"),
    ],
)
def test_a_record_that_does_not_name_a_leaf_and_a_cell_is_refused(
    attributes: dict[str, str], reason: str, message: str
) -> None:
    from streamdp.engine.events import RejectedError

    stream = next(iter(small_county_spec().streams.values()))
    extractor = stream_kind("places").extractor(stream)
    with pytest.raises(RejectedError, match=message) as caught:
        extractor.contribution({"attributes": attributes})
    assert caught.value.reason == reason


def test_refusing_a_place_costs_no_more_than_accepting_one() -> None:
    """The places records may not name are known when the extractor is made: the first refusal
    built an index of every place (+13 MB at 2 x 10^5 places, 0.6 s at 10^6; audit of
    2026-11-28), so the work a record cost depended on the records before it."""
    import contextlib
    import tracemalloc

    from streamdp.engine.events import RejectedError

    rows = ["node,parent,label", "US,,Nation"]
    for s in range(400):
        rows.append(f"S{s},US,State {s}")
        rows.extend(f"C{s}_{c},S{s},County {c}" for c in range(500))
    places = parse_places(("\n".join(rows) + "\n").encode(), "big.csv")
    base = next(iter(small_county_spec().streams.values()))
    stream = replace(base, counters=replace(base.counters, attributes=(), places=places))
    extractor = stream_kind("places").extractor(stream)
    tracemalloc.start()
    try:
        for place in ("NOWHERE", "S7", "C3_4"):
            with contextlib.suppress(RejectedError):
                extractor.contribution({"attributes": {"county": place}})
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert places.size == 200_401
    assert peak < 64 * 1024, peak


def _random_tree(rng: np.random.Generator, size: int) -> Tree:
    """A random tree of ``size`` nodes in breadth-first order (unbalanced, any fan-out)."""
    parents = np.sort(rng.integers(0, np.arange(1, size)))
    # breadth-first needs parent[i] < i and non-decreasing: sorting draws below i keeps both
    parents = np.minimum(parents, np.arange(size - 1))
    return Tree(np.concatenate([[-1], parents]))


def _dense_projector(tree: Tree) -> npt.NDArray[np.float64]:
    constraint = tree.constraint_matrix().toarray()
    projector: npt.NDArray[np.float64] = np.eye(tree.size) - np.linalg.pinv(constraint) @ constraint
    return projector


@pytest.mark.parametrize("seed", range(12))
def test_the_two_passes_equal_the_dense_solves_on_random_trees(seed: int) -> None:
    rng = np.random.default_rng(seed)
    tree = _random_tree(rng, int(rng.integers(2, 60)))
    x = rng.normal(scale=20.0, size=(5, tree.size))
    constraint = tree.constraint_matrix().toarray()
    # unweighted: the Moore-Penrose general solution (seed 004 Theorem 1)
    reference = np.stack([dense_projection(row, constraint) for row in x])
    assert np.allclose(tree_projection(x, tree), reference, atol=1e-9)
    projector = _dense_projector(tree)
    assert np.allclose(tree_projection_variances(tree), np.diag(projector), atol=1e-12)
    # weighted (per-node variances): the dense GLS solve and its covariance's diagonal
    variances = rng.uniform(0.2, 5.0, size=tree.size)
    v = np.diag(variances)
    gls = np.eye(tree.size) - v @ constraint.T @ np.linalg.pinv(constraint @ v @ constraint.T) @ (
        constraint
    )
    assert np.allclose(tree_projection(x, tree, variances), x @ gls.T, atol=1e-9)
    assert np.allclose(
        tree_projection_variances(tree, variances), np.diag(gls @ v @ gls.T), atol=1e-9
    )


def test_the_kind_projects_every_cell_on_the_tree_and_knows_its_diagonal() -> None:
    spec = small_county_spec()
    stream = next(iter(spec.streams.values()))
    kind = stream_kind("places")
    width = stream.counters.width
    dense = kind.project(stream, np.eye(width))  # row i: P e_i
    # the reference: the counter-space constraint matrix (every cell's tree constraints)
    places = stream.counters.places
    assert places is not None
    tree_rows = places.tree.constraint_matrix().toarray()
    constraint = np.kron(tree_rows, np.eye(2))  # place-major, cells inner
    reference = np.eye(width) - np.linalg.pinv(constraint) @ constraint
    assert np.allclose(dense, reference, atol=1e-9)
    assert np.allclose(kind.projection_diagonal(stream), np.diag(reference), atol=1e-12)
    assert np.allclose(kind.projection_diagonal(stream), np.diag(dense), atol=1e-12)


def test_the_committed_example_geography_is_the_generators_output() -> None:
    committed = (EXAMPLES / "counties.csv").read_text(encoding="utf-8")
    assert committed == places_csv(synthetic_counties())
    spec = load_spec(EXAMPLES / "county_admissions.toml")
    stream = spec.streams["admissions-by-county"]
    places = stream.counters.places
    assert places is not None
    assert places.size == 1 + 50 + 3143
    assert len(places.tree.leaves) == 3143
    assert stream.counters.width == 2 * places.size
    assert stream.sensitivity == places.levels == 3


def test_a_spec_given_as_text_reads_its_places_from_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _spec_file(tmp_path)
    monkeypatch.chdir(tmp_path)
    spec = parse_spec(path.read_text(encoding="utf-8"))
    assert replace(spec).streams["by-place"].counters.width == 6
