"""The feed page's view of a places stream (issue 29): pick a place, see its series and its
children.

JavaScript appended to :data:`streamdp.feed.page_script.SCRIPT` (it uses that script's ``el``,
``num``, ``chart``, ``band``, ``periodLabel`` and ``render``). A place is chosen from the path
above it (each ancestor a button), by name (a search box over every place's label) or by
descending from the table of its children; with attributes, a cell is chosen too. The root's
series is in the page's data; another place's series is fetched from
``series/<stream>/<place>.json`` (:mod:`streamdp.feed.places_view`), which the feed serves and
``--output-dir`` writes beside the page.
"""

from __future__ import annotations

PLACES_SCRIPT = r"""
const placeChoice = {};  // stream -> {place, cell}
const placeSeries = new Map();  // "stream|version|place" -> counters, or "loading", or an Error

// Every place's name for the search box: its label, with its identifier when labels repeat.
function placeNames(nodes) {
  const seen = new Map();
  for (const n of nodes) seen.set(n[2], (seen.get(n[2]) || 0) + 1);
  return nodes.map(n => seen.get(n[2]) > 1 ? `${n[2]} [${n[0]}]` : n[2]);
}
// The place a link chose: "#place=<stream>/<place identifier>" (null: none of this stream).
function linkedPlace(stream, nodes) {
  const m = /^#place=([^/]+)\/(.+)$/.exec(location.hash);
  if (!m || decodeURIComponent(m[1]) !== stream) return null;
  const i = nodes.findIndex(n => n[0] === decodeURIComponent(m[2]));
  return i >= 0 ? i : null;
}
window.addEventListener("hashchange", () => {
  for (const name of Object.keys(placeChoice)) delete placeChoice[name];
  render();
});
function counterName(places, place, cell) {
  const id = places.nodes[place][0];
  return places.cells.length ? `${id}/${places.cells[cell]}` : id;
}

// The chosen place's counters (one per cell): the root's are in the page's data, others are
// fetched once per feed version; null while loading or after a failure (said in `note`).
function seriesOf(stream, place, note) {
  if (place === 0) return stream.counters;
  const key = `${stream.stream}|${feed.version}|${place}`;
  const held = placeSeries.get(key);
  if (Array.isArray(held)) return held;
  if (held instanceof Error) {
    note.textContent = location.protocol.startsWith("http")
      ? `Could not load this place's series (${held.message}).`
      : "Other places' series are separate files beside this page (series/...): open it "
        + "through the streamdp feed command or any web server to see them.";
    return null;
  }
  note.textContent = "Loading this place's series\u2026";
  if (held === undefined) {
    placeSeries.set(key, "loading");
    fetch(`series/${encodeURIComponent(stream.stream)}/${place}.json`, {cache: "no-store"})
      .then(r => { if (!r.ok) throw new Error(`HTTP ${r.status}`); return r.json(); })
      .then(doc => { placeSeries.set(key, doc.counters.map(c => ({...c, periods: doc.periods})));
                     render(); })
      .catch(e => { placeSeries.set(key, e instanceof Error ? e : new Error(String(e)));
                    render(); });
  }
  return null;
}

function placesBody(stream, sec, unit) {
  const when = p => periodLabel(p, stream.period_unit);
  const P = stream.places;
  const nodes = P.nodes, cells = P.cells, width = Math.max(cells.length, 1);
  const state = placeChoice[stream.stream]
    || (placeChoice[stream.stream] = {place: linkedPlace(stream.stream, nodes) ?? 0, cell: 0});
  if (state.place >= nodes.length) state.place = 0;
  if (state.cell >= width) state.cell = 0;
  const children = nodes.map(() => []);
  nodes.forEach((n, i) => { if (n[1] !== null && n[1] !== undefined) children[n[1]].push(i); });
  const go = i => {
    state.place = i;
    // a link to this view (the page's address keeps the place)
    history.replaceState(null, "", `#place=${encodeURIComponent(stream.stream)}/`
                         + encodeURIComponent(nodes[i][0]));
    render();
  };
  const placeButton = i => {
    const b = el("button", {type: "button", class: "link", "data-place": nodes[i][0]},
                 nodes[i][2]);
    b.addEventListener("click", () => go(i));
    return b;
  };

  // where we are: the path from the root, every ancestor a button
  const path = [];
  for (let i = state.place; i !== null && i !== undefined; i = nodes[i][1]) path.unshift(i);
  const crumbs = el("p", {class: "breadcrumb", "aria-label": "place"}, "Place: ");
  path.forEach((i, k) => {
    if (k) crumbs.append(" \u203a ");
    crumbs.append(i === state.place ? el("strong", {"data-place": nodes[i][0]}, nodes[i][2])
                                    : placeButton(i));
  });
  sec.append(crumbs);

  // find a place by name; choose a cell
  const names = placeNames(nodes);
  const listId = `places-${stream.stream}`;
  const list = el("datalist", {id: listId});
  for (const name of names) list.append(el("option", {value: name}));
  const search = el("input", {type: "search", list: listId, placeholder: "find a place",
                              "aria-label": "find a place", class: "place-search"});
  const said = el("span", {class: "search-note"});
  search.addEventListener("change", () => {
    const found = names.indexOf(search.value.trim());
    if (found >= 0) go(found);
    else if (search.value.trim()) said.textContent = ` no place is named "${search.value}"`;
  });
  const controls = el("p", {class: "place-controls"}, list, search, said);
  if (cells.length) {
    const select = el("select", {"aria-label": "cell"});
    cells.forEach((cell, c) => {
      const opt = el("option", {value: String(c)}, cell);
      if (c === state.cell) opt.selected = true;
      select.append(opt);
    });
    select.addEventListener("change", () => { state.cell = Number(select.value); render(); });
    controls.append(" Cell: ", select);
  }
  sec.append(controls);

  // the chosen place's series
  const label = nodes[state.place][2];
  const cellName = cells.length ? ` (${cells[state.cell]})` : "";
  const note = el("p", {class: "series-note"});
  sec.append(note);
  const counters = seriesOf(stream, state.place, note);
  const name = counterName(P, state.place, state.cell);
  const counter = counters && counters.find(c => c.counter === name);
  if (counter) {
    const periods = counter.periods || stream.periods;
    const at = {periods: periods};
    const series = periods.map((_, i) => valueAt(at, counter, i)).filter(p => p !== null);
    const totals = series.map(p => ({y: p.noisy_total, lo: p.noisy_total - p.total_half_width95,
      hi: p.noisy_total + p.total_half_width95, c: p.consistent_total,
      label: when(p), epoch: p.epoch}));
    const counts = series.map(p => ({y: p.noisy_count, lo: p.noisy_count - p.count_half_width95,
      hi: p.noisy_count + p.count_half_width95, label: when(p), epoch: p.epoch}));
    const totalChart = chart(`${label}${cellName}: running total${unit} (line), 95% band `
                             + "(shaded), consistent total (dashed)", totals,
                             {line: true, kind: "totals"});
    const countChart = chart(`${label}${cellName}: noisy count${unit} per period, with 95% `
                             + "interval", counts, {line: false, kind: "counts"});
    sec.append(totalChart, countChart);
  } else if (counters) {
    note.textContent = "No releases of this place yet.";
  }

  // the latest period of the place and its children
  const latest = stream.latest_period;
  const revised = P.consistent;
  const sameDay = revised && revised.epoch === P.latest.epoch && revised.period === P.latest.period;
  sec.append(el("h3", {}, `Latest period: ${when(latest)} `
                + `(epoch ${latest.epoch}, period ${latest.period})${cellName}`));
  const pm = (value, sd) => value === null || value === undefined ? "\u2013"
    : `${released(value)} \u00b1 ${up(band(sd), 0)}`;
  const revisedPm = (value, sd) => value === null || value === undefined ? "\u2013"
    : sd === null || sd === undefined ? num(value, 1)
    : `${num(value, 1)} \u00b1 ${up(band(sd), 0)}`;
  const revisedHead = !revised ? "consistent total"
    : sameDay ? `consistent total ${PM95}`
    : `consistent total ${PM95} (${when(revised)})`;
  // the stream's non-negative integer estimates, when it publishes them (biased: labelled)
  const integers = revised && revised.nonnegative_total;
  const table = el("table", {class: "latest places-table"},
    el("tr", {}, el("th", {}, "place"), el("th", {}, `noisy count ${PM95}`),
       el("th", {}, `running total ${PM95}`), el("th", {}, revisedHead),
       ...(integers ? [el("th", {}, sameDay ? "non-negative integer total*"
                             : `non-negative integer total* (${when(revised)})`)] : [])));
  const row = (i, chosen) => {
    const k = i * width + state.cell;
    const kids = children[i].length;
    const name = chosen ? el("strong", {}, nodes[i][2])
      : el("span", {}, placeButton(i), kids ? ` (${kids} below)` : "");
    return el("tr", {"data-place": nodes[i][0], class: chosen ? "chosen" : "child"},
      el("td", {}, name),
      el("td", {class: "count"}, pm(P.latest.noisy_count[k], P.latest.count_std[k])),
      el("td", {class: "total"}, pm(P.latest.noisy_total[k], P.latest.total_std[k])),
      el("td", {class: "consistent"},
         revised ? revisedPm(revised.total[k], revised.total_std[k]) : "not yet revised"),
      ...(integers ? [el("td", {class: "integer"}, num(integers[k], 0))] : []));
  };
  table.append(row(state.place, true));
  for (const i of children[state.place]) table.append(row(i, false));
  sec.append(tableWrap(table));
  if (integers) {
    sec.append(el("p", {class: "facts"}, "* Non-negative integer estimates of the consistent "
      + "running totals (post-processing, every place the sum of the places below it): easier "
      + "to read, but biased (rounding up at 0 lifts small places and lowers their siblings); "
      + "the consistent totals beside them are the unbiased estimates."));
  }
  const kids = children[state.place];
  if (!kids.length) {
    sec.append(el("p", {class: "facts"}, "This place has no places below it."));
  } else if (revised && revised.constraint === "tree") {
    const k = state.place * width + state.cell;
    const sum = kids.reduce((s, i) => s + (revised.total[i * width + state.cell] || 0), 0);
    sec.append(el("p", {class: "facts tree-sum"},
      `The consistent running totals of its ${kids.length} places add up to ${num(sum, 1)}; `
      + `its own is ${num(revised.total[k], 1)} (constraint: every place is the sum of the `
      + `places below it). The noisy releases need not add up: each has its own noise.`));
  }
  sec.append(el("p", {class: "facts"}, revised
    ? `Latest consistent revision: ${revised.revision}, `
      + `covering ${plural(revised.periods_covered, "period")} `
      + `(constraint: ${revised.constraint}); its newest period is ${when(revised)} `
      + `(epoch ${revised.epoch}, period ${revised.period}).`
    : "No consistent revision yet."));
}
"""
