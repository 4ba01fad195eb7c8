"""The feed page's script: it draws the embedded feed data as inline SVG charts and tables.

JavaScript kept as one string that :func:`streamdp.feed.page.render_page` inlines (the page loads
nothing external). It reads the JSON of ``<script id="feed-data">``, draws every stream with DOM
calls only (record strings are set as text, never parsed as HTML) and, when served over HTTP,
polls ``version.json`` every :data:`POLL_MILLISECONDS` and fetches ``feed.json`` when the
feed's version changed.
"""

from __future__ import annotations

from streamdp.error_band import LAPLACE_95_SD
from streamdp.feed.page_chart_script import CHART_SCRIPT
from streamdp.feed.page_places_script import PLACES_SCRIPT
from streamdp.feed.page_privacy_script import PRIVACY_SCRIPT

#: How often the served page asks for ``feed.json``, in milliseconds.
POLL_MILLISECONDS = 3000

#: The script, with ``__POLL__`` standing for :data:`POLL_MILLISECONDS`, ``__CHART__`` for the
#: chart (:mod:`streamdp.feed.page_chart_script`), ``__PRIVACY__`` for the privacy wording
#: (:mod:`streamdp.feed.page_privacy_script`) and ``__PLACES__`` for the places view
#: (:mod:`streamdp.feed.page_places_script`).
SCRIPT = r"""
"use strict";
const POLL_MS = __POLL__;
const BAND_SD = __BAND_SD__;
const SVG = "http://www.w3.org/2000/svg";
let feed = JSON.parse(document.getElementById("feed-data").textContent);
const chosen = {};

function el(tag, attrs, ...children) {
  const node = tag.startsWith("svg:") ? document.createElementNS(SVG, tag.slice(4))
                                      : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
  for (const c of children) node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return node;
}
// "± 95%" in a column title: a title may wrap on a phone, never between "±" and "95%"
const PM95 = "\u00b1\u00a095%";
function num(v, digits) {
  if (v === null || v === undefined) return "\u2013";
  const text = Number(v).toLocaleString("en-US", {maximumFractionDigits: digits});
  // a negative value that rounds to zero is written 0, never "-0" (-0.3 at 0 digits)
  return /^-0(\.0*)?$/.test(text) ? text.slice(1) : text;
}
// A released value as published: an integer as itself, a real-valued release (kary_gls, blt,
// a projected k-ary stream) to one decimal, so that it does not read as a different estimate
// from its consistent revision (which the page writes to one decimal too)
function released(v) {
  return num(v, v === null || v === undefined || Number.isInteger(Number(v)) ? 0 : 1);
}
// A table in a box that scrolls sideways when the table is wider than the page (a phone):
// the box is then marked "scrolls", which shows a note above the table and a shadow at the
// edge that hides columns (see the page's style). Checked whenever the box or the table
// changes size (the window's width, a <details> opened, the table's font loaded).
const wrapSizes = new ResizeObserver(entries => {
  for (const entry of entries) {
    if (!entry.target.isConnected) { wrapSizes.unobserve(entry.target); continue; }
    const wrap = entry.target.closest(".table-wrap");
    wrap.classList.toggle("scrolls", wrap.scrollWidth > wrap.clientWidth + 1);
  }
});
function tableWrap(table) {
  const wrap = el("div", {class: "table-wrap"}, table);
  wrapSizes.observe(wrap);
  wrapSizes.observe(table);
  return wrap;
}
// v with at most `digits` decimals, rounded UP when it has more (a privacy loss or a 95%
// half-width is never shown smaller than it is)
function up(v, digits) {
  if (v === null || v === undefined) return "\u2013";
  const exact = Number(Number(v).toFixed(digits)) === Number(v);
  const f = Math.pow(10, digits);
  const shown = exact ? Number(v) : Math.ceil(Number(v) * f) / f;
  return shown.toLocaleString("en-US", {maximumFractionDigits: digits});
}
// "1 record", "2 records"
function plural(n, word) { return `${n} ${word}${n === 1 ? "" : "s"}`; }
function day(iso) { return String(iso).slice(0, 10); }
const MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov",
                "Dec"];
// A period in words from its own RFC 3339 bounds, read as their local date and time as
// written (the stream's time zone, never the reader's). Whole local days are labelled by
// their first and last day (the end is exclusive: the last day is the one before it); by
// month only in a stream of calendar months (``unit``: its period_unit) and when they run
// from the 1st of a month to the 1st of a later one, whatever their length in hours (a clock
// change makes October 745 h): "Mar 2024", "Jan 2024 to Mar 2024", "2024-03-05",
// "2024-01-15 to 2024-02-14"; else "2024-03-05 13:00 to 14:00" or
// "2024-03-05 13:00 to 2024-03-06 13:00".
function periodLabel(p, unit) {
  const start = String(p.period_start), end = String(p.period_end);
  const date = start.slice(0, 10), endDate = end.slice(0, 10);
  const time = start.slice(11, 16), endTime = end.slice(11, 16);
  // local midnight: the time as written, whatever the offset after it
  const midnight = t => /^00:00(:00(\.0+)?)?$/.test(t.slice(11).replace(/(Z|[+-]\d\d:\d\d)$/, ""));
  if (!(midnight(start) && midnight(end))) {
    return endDate === date ? `${date} ${time} to ${endTime}`
                            : `${date} ${time} to ${endDate} ${endTime}`;
  }
  const [y, m, d] = date.split("-").map(Number);
  const [ey, em, ed] = endDate.split("-").map(Number);
  const month = (year, number) => `${MONTHS[number - 1]} ${year}`;
  // months: a calendar-month stream's (unit "month"; records before the field: by the dates)
  const months = unit === "month" || unit === undefined || unit === null;
  if (months && d === 1 && ed === 1 && (ey - y) * 12 + em - m >= 1) {
    const lastYear = em === 1 ? ey - 1 : ey, lastMonth = em === 1 ? 12 : em - 1;
    return lastYear === y && lastMonth === m ? month(y, m)
                                             : `${month(y, m)} to ${month(lastYear, lastMonth)}`;
  }
  // the last day: the exclusive end's date minus one calendar day
  const last = new Date(Date.UTC(ey, em - 1, ed - 1)).toISOString().slice(0, 10);
  return last === date ? date : `${date} to ${last}`;
}

__CHART__
__PRIVACY__

// a consistent value with its 95% half-width when the record carries its standard deviation
function fair(rev, values, widths, name) {
  const width = rev[widths] ? rev[widths][name] : undefined;
  const value = num(rev[values][name], 1);
  return width === undefined ? value : `${value} \u00b1 ${up(width, 0)}`;
}

// The 95% half-width of a released value with noise standard deviation sd (streamdp.error_band).
function band(sd) { return BAND_SD * sd + 1; }
// The values of one counter in the period at index i of stream.periods (null: none there).
function valueAt(stream, counter, i) {
  if (i < 0 || counter.noisy_count[i] === null || counter.noisy_count[i] === undefined) {
    return null;
  }
  const [epoch, period, start, end] = stream.periods[i];
  return {epoch: epoch, period: period, period_start: start, period_end: end,
          noisy_count: counter.noisy_count[i], count_half_width95: band(counter.count_std[i]),
          noisy_total: counter.noisy_total[i], total_half_width95: band(counter.total_std[i]),
          consistent_total: counter.consistent_total[i]};
}
function periodIndex(stream, epoch, period) {
  return stream.periods.findIndex(p => p[0] === epoch && p[1] === period);
}

// Census-style counters ("total", "attribute=category", "a=x,b=y,...") grouped for display:
// {total, marginals: [[attribute, counters]], cells}; null for other kinds of counters.
function attributeGroups(counters) {
  const total = counters.filter(c => c.counter === "total");
  const marginals = new Map();
  const cells = [];
  for (const c of counters) {
    if (c.counter === "total") continue;
    const parts = c.counter.split(",");
    if (!parts.every(part => part.includes("="))) return null;
    if (parts.length > 1) { cells.push(c); continue; }
    const attribute = parts[0].split("=")[0];
    if (!marginals.has(attribute)) marginals.set(attribute, []);
    marginals.get(attribute).push(c);
  }
  return marginals.size ? {total: total, marginals: [...marginals], cells: cells} : null;
}

// a stream with budget groups: each group's share of the budget, in declared order
function budgetSplit(stream) {
  const groups = stream.budget_groups || [];
  if (!groups.length) return "";
  const zcdp = stream.rho_per_epoch && stream.rho_per_epoch.length;
  const parts = groups.map(g => `${g.name} ${+(100 * g.share).toFixed(2)}%`
    + ` (${num(g.counters, 0)} counter${g.counters === 1 ? "" : "s"})`);
  return ` The budget is split between groups of counters, each spending its share of the `
    + `stream's ${zcdp ? "\u03c1" : "\u03b5"}: ${parts.join(", ")}.`;
}

// How a unit stream's sensitivity follows from its bounds: M = a x max(b, 2) records, one
// event's bound times M (with one period an epoch, one record under a unit's identifier can
// move its records to another period: counted as two)
function unitMultiple(stream) {
  const [a, b] = stream.unit_bounds;
  const m = a * Math.max(b, 2);
  const event = num(stream.sensitivity / m, 6);
  return `that is one event's ${event} times ${m} = ${a} \u00d7 ${Math.max(b, 2)} records`
    + (b < 2 ? " (one period an epoch counts as two: one record under a unit's identifier can "
               + "move its records to another period)" : "");
}

function streamSection(stream) {
  const sec = el("section", {class: "stream", "data-stream": stream.stream});
  const when = p => periodLabel(p, stream.period_unit);
  sec.append(el("h2", {}, stream.title || `Stream ${stream.stream}`));
  if (stream.description) sec.append(el("p", {class: "description"}, stream.description));
  const unit = stream.unit ? ` (${stream.unit})` : "";
  const perUnit = stream.protects && stream.protects !== "event";
  const loss = streamLoss(stream);
  // a zCDP stream's Gaussian noise is calibrated on the L2 bound: both are shown
  const sensitivity = stream.l2_sensitivity
    ? `sensitivity L1 ${stream.sensitivity}, L2 ${num(stream.l2_sensitivity, 4)}`
    : `sensitivity ${stream.sensitivity}`;
  const bound = perUnit && stream.unit_bounds
    ? `${sensitivity} per ${stream.protects} (each counted in at most `
      + `${plural(stream.unit_bounds[1], "period")} of an epoch, at most `
      + `${plural(stream.unit_bounds[0], "record")} a period; records beyond that are not `
      + `counted; ${unitMultiple(stream)})`
    : `${sensitivity} per event`;
  sec.append(el("p", {class: "facts"},
    (stream.title ? `Stream ${stream.stream}. ` : "")
    + `Mechanism ${stream.mechanism} (objective ${stream.objective}), `
    + `horizon ${stream.horizon} periods per epoch, `
    + `${bound}, noise ${stream.noise}. ` + loss + budgetSplit(stream)));
  if (!stream.noise_secure) {
    sec.append(el("p", {class: "warning"}, "These releases used the INSECURE seeded test "
                + "sampler: they are NOT private and must not be published."));
  }
  const names = stream.counters.map(c => c.counter);
  if (!names.length) { sec.append(el("p", {}, "No releases yet.")); return sec; }
  if (stream.places) { placesBody(stream, sec, unit); return sec; }
  const current = names.includes(chosen[stream.stream]) ? chosen[stream.stream] : names[0];
  const select = el("select", {"aria-label": "counter"});
  for (const name of names) {
    const opt = el("option", {value: name}, name);
    if (name === current) opt.selected = true;
    select.append(opt);
  }
  select.addEventListener("change", () => { chosen[stream.stream] = select.value; render(); });
  sec.append(el("p", {}, "Counter: ", select));
  const chosenCounter = stream.counters.find(c => c.counter === current);
  const series = stream.periods.map((_, i) => valueAt(stream, chosenCounter, i))
    .filter(p => p !== null);
  const label = p => when(p);
  const totals = series.map(p => ({
    y: p.noisy_total, lo: p.noisy_total - p.total_half_width95,
    hi: p.noisy_total + p.total_half_width95,
    c: p.consistent_total, label: label(p), epoch: p.epoch}));
  const counts = series.map(p => ({y: p.noisy_count, lo: p.noisy_count - p.count_half_width95,
                                   hi: p.noisy_count + p.count_half_width95, label: label(p),
                                   epoch: p.epoch}));
  const totalChart = chart(
    `${current}: running total${unit} (line), 95% band (shaded), consistent total (dashed)`,
    totals, {line: true, kind: "totals"});
  const countChart = chart(`${current}: noisy count${unit} per period, with 95% interval`,
                           counts, {line: false, kind: "counts"});
  sec.append(totalChart, countChart);

  const latest = stream.latest_period;
  const newest = stream.consistent_latest;
  const cLatest = newest && newest.epoch === latest.epoch && newest.period === latest.period
    ? newest : null;
  const latestIndex = periodIndex(stream, latest.epoch, latest.period);
  sec.append(el("h3", {}, `Latest period: ${when(latest)} `
                + `(epoch ${latest.epoch}, period ${latest.period})`));
  const latestTable = (counters, named) => {
    const table = el("table", {class: "latest"},
      el("tr", {}, el("th", {}, named ? "category" : "counter"),
         el("th", {}, `noisy count ${PM95}`), el("th", {}, `running total ${PM95}`),
         el("th", {}, `consistent count ${PM95}`), el("th", {}, `consistent total ${PM95}`)));
    for (const c of counters) {
      const p = valueAt(stream, c, latestIndex);
      if (!p) continue;
      table.append(el("tr", {"data-counter": c.counter},
        el("td", {}, named ? named(c.counter) : c.counter),
        el("td", {class: "count"},
           `${released(p.noisy_count)} \u00b1 ${up(p.count_half_width95, 0)}`),
        el("td", {class: "total"},
           `${released(p.noisy_total)} \u00b1 ${up(p.total_half_width95, 0)}`),
        el("td", {}, cLatest ? fair(cLatest, "counts", "count_half_width95", c.counter)
                             : "not yet revised"),
        el("td", {}, cLatest ? fair(cLatest, "totals", "total_half_width95", c.counter)
                             : "not yet revised")));
    }
    return tableWrap(table);
  };
  const groups = attributeGroups(stream.counters);
  if (!groups) {
    sec.append(latestTable(stream.counters, null));
  } else {
    // census-style: the total, one small table per attribute (its marginal), the cells folded
    sec.append(latestTable(groups.total, null));
    const grid = el("div", {class: "marginals"});
    for (const [attribute, members] of groups.marginals) {
      grid.append(el("div", {class: "marginal"}, el("h4", {}, attribute),
                     latestTable(members, name => name.slice(attribute.length + 1))));
    }
    sec.append(grid);
    if (groups.cells.length) {
      sec.append(el("details", {class: "cells"},
        el("summary", {}, `All ${groups.cells.length} cells (every combination of categories)`),
        latestTable(groups.cells, null)));
    }
  }
  const rev = stream.consistent_latest;
  if (rev && !cLatest) {
    // the newest revised period, each value beside the release of that same period
    const box = el("details", {class: "consistent-latest"});
    box.open = Object.keys(rev.counts).length <= 12;
    box.append(el("summary", {}, `Latest consistent values: ${when(rev)} `
                  + `(epoch ${rev.epoch}, period ${rev.period}), revision ${rev.revision}`));
    const revised = el("table", {},
      el("tr", {}, el("th", {}, "counter"), el("th", {}, `consistent count ${PM95}`),
         el("th", {}, `consistent total ${PM95}`), el("th", {}, `released total ${PM95}`)));
    const declared = stream.counters.map(q => q.counter);
    const order = declared.filter(n => n in rev.counts)
      .concat(Object.keys(rev.counts).filter(n => !declared.includes(n)).sort());
    for (const name of order) {
      const c = stream.counters.find(q => q.counter === name);
      const p = c && valueAt(stream, c, periodIndex(stream, rev.epoch, rev.period));
      revised.append(el("tr", {}, el("td", {}, name),
        el("td", {}, fair(rev, "counts", "count_half_width95", name)),
        el("td", {}, fair(rev, "totals", "total_half_width95", name)),
        el("td", {}, p ? `${released(p.noisy_total)} \u00b1 ${up(p.total_half_width95, 0)}`
                       : "\u2013")));
    }
    box.append(tableWrap(revised));
    sec.append(box);
  }
  sec.append(el("p", {class: "facts"}, rev
    ? `Latest consistent revision: ${rev.revision}, `
      + `covering ${plural(rev.periods_covered, "period")} (constraint: ${rev.constraint}); `
      + `its newest period is ${when(rev)} `
      + `(epoch ${rev.epoch}, period ${rev.period}).`
    : "No consistent revision yet."));
  return sec;
}

__PLACES__
function render() {
  document.getElementById("sources").replaceChildren(sourcesSection(feed));
  const root = document.getElementById("streams");
  root.replaceChildren(...feed.streams.map(streamSection));
  if (!feed.streams.length) {
    root.append(el("p", {}, "No releases yet: this page fills in as periods are released."));
  }
  document.getElementById("source").textContent = feed.source;
  const released = feed.streams.filter(s => s.latest_period)
    .sort((a, b) => Date.parse(a.latest_period.period_end)
                    - Date.parse(b.latest_period.period_end));
  const newest = released.at(-1), oldest = released[0];
  const label = s => periodLabel(s.latest_period, s.period_unit);
  const behind = oldest && oldest.latest_period.period_end !== newest.latest_period.period_end
    ? ` Not every stream is that far: the latest period of ${oldest.title || oldest.stream} `
      + `is ${label(oldest)}; each stream gives its own latest period below.`
    : "";
  document.getElementById("status").textContent = newest
    ? `Data as of the end of ${label(newest)}, the latest period released.${behind}`
    : "No period released yet.";
}
let resizing = null;
window.addEventListener("resize", () => {
  clearTimeout(resizing);
  resizing = setTimeout(render, 200);
});

async function poll() {
  try {
    const probe = await fetch("version.json", {cache: "no-store"});
    if (!probe.ok || (await probe.json()).version === feed.version) return;
    const response = await fetch("feed.json", {cache: "no-store"});
    if (!response.ok) return;
    feed = await response.json();
    render();
  } catch (e) {
    document.getElementById("status").textContent = `Cannot reach the feed (${e}); retrying.`;
  }
}

render();
if (location.protocol.startsWith("http")) setInterval(poll, POLL_MS);
"""


def page_script() -> str:
    """The script with the places view, its poll interval and the 95% band's sd multiple
    filled in."""
    return (
        SCRIPT.replace("__CHART__", CHART_SCRIPT)
        .replace("__PRIVACY__", PRIVACY_SCRIPT)
        .replace("__PLACES__", PLACES_SCRIPT)
        .replace("__POLL__", str(POLL_MILLISECONDS))
        .replace("__BAND_SD__", repr(LAPLACE_95_SD))
    )
