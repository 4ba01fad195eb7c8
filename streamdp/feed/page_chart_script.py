"""The feed page's chart: one SVG series with its 95% band or error bars, under a caption.

JavaScript spliced into :data:`streamdp.feed.page_script.SCRIPT` (it uses that script's ``el``,
``num`` and ``up``): ``chart(title, points, opts)`` draws the series at the width it is shown at, so
its text keeps its size on a phone, with axis ticks, the first and last period, epoch marks
and, for a line, the shaded band; words are placed only where they fit.
"""

from __future__ import annotations

CHART_SCRIPT = r"""
// the most a character of the charts' 11 px tick text is wide, to place words that must fit
const CHAR_PX = 7;

// Axis ticks over [lo, hi]: multiples of a nice step (1, 2, 2.5 or 5 x 10^k), the largest
// one that still gives at least 3 ticks (about 4 intervals when the span allows; at most 6
// ticks). The step of span / 4 rounded up alone can leave one tick (-420..399: 500).
function ticks(lo, hi) {
  const span = hi - lo || 1;
  if (!Number.isFinite(span)) return {step: 1, values: []};
  const at = step => {
    const out = [];
    // integer multiples of the step: no float drift, and + 0 turns -0 into 0
    for (let k = Math.ceil(lo / step); k * step <= hi; k++) out.push(k * step + 0);
    return out;
  };
  let mag = Math.pow(10, Math.floor(Math.log10(span / 4)) + 1);
  for (;;) {  // nice steps from above span / 4 downwards: the first with 3 ticks
    for (const m of [5, 2.5, 2, 1]) {
      const step = m * mag;
      if (step <= span) {
        const out = at(step);
        if (out.length >= 3) return {step: step, values: out};
      }
    }
    mag /= 10;
  }
}
// the decimals a tick label needs at this step (0.25: 2, 2.5: 1, 250: 0)
function tickDigits(step) {
  const text = String(Number(step.toPrecision(3)));
  return text.includes(".") ? text.split(".")[1].length : 0;
}

// charts drawn so far: each one's clip path gets an id of its own
let chartCount = 0;

// One chart, titled by a caption that wraps at any width: x = position in the series,
// y = values; opts.line draws a line with a shaded band, else points with error bars;
// opts.kind names it (class chart-<kind> on its svg).
function chart(title, points, opts) {
  // drawn at the width it is shown at, so its text keeps its size on a phone
  const W = Math.max(300, Math.min(1100, document.getElementById("streams").clientWidth || 1000));
  const H = W < 600 ? 210 : 250, L = W < 600 ? 52 : 70, R = 12, T = 14, B = 34;
  const caption = el("figcaption", {class: "legend"}, title);
  const svg = el("svg:svg", {viewBox: `0 0 ${W} ${H}`, width: "100%", role: "img",
                             class: `chart-${opts.kind}`, "aria-label": title,
                             "data-points": points.length});
  const figure = el("figure", {class: "chart"}, caption, svg);
  if (!points.length) {
    svg.append(el("svg:text", {x: L, y: H / 2, class: "tick"}, "no releases yet"));
    return figure;
  }
  let lo = Infinity, hi = -Infinity;
  for (const p of points) {
    lo = Math.min(lo, p.lo, p.y, p.c ?? p.y, 0); hi = Math.max(hi, p.hi, p.y, p.c ?? p.y);
  }
  if (lo === hi) hi = lo + 1;
  const n = points.length;
  // the series keeps PAD px clear of the y axis and of the right edge, so the first and the
  // last period's dot and bar are drawn whole inside the plot, not on the axis or past it
  const PAD = 8;
  const x = i => L + PAD + (n === 1 ? (W - L - R) / 2 - PAD
                                    : i * (W - L - R - 2 * PAD) / (n - 1));
  const y = v => T + (hi - v) * (H - T - B) / (hi - lo);
  const axis = ticks(lo, hi);
  for (const t of axis.values) {
    svg.append(el("svg:line", {x1: L - 4, x2: L, y1: y(t), y2: y(t), class: "axis"}));
    svg.append(el("svg:text", {x: L - 7, y: y(t) + 4, "text-anchor": "end", class: "tick"},
                  num(t, tickDigits(axis.step))));
  }
  svg.append(el("svg:line", {x1: L, x2: L, y1: T, y2: H - B, class: "axis"}));
  svg.append(el("svg:line", {x1: L, x2: W - R, y1: y(0), y2: y(0), class: "zero"}));
  // the first and last period under the axis; one line each when both fit, else stacked
  const first = points[0].label, last = points[n - 1].label;
  const sideBySide = (first.length + last.length + 3) * CHAR_PX < W - L - R;
  svg.append(el("svg:text", {x: L, y: H - (sideBySide ? 10 : 20), class: "tick"}, first));
  if (n > 1) {
    svg.append(el("svg:text", {x: W - R, y: H - (sideBySide ? 10 : 4), "text-anchor": "end",
                               class: "tick"}, last));
  }
  // where a new epoch starts (its running totals start again from zero); a mark's words
  // only where they do not run into the previous mark's
  let freeFrom = -Infinity;
  points.forEach((p, i) => {
    if (i > 0 && p.epoch !== points[i - 1].epoch) {
      const at = (x(i - 1) + x(i)) / 2, words = `epoch ${p.epoch}`;
      svg.append(el("svg:line", {x1: at, x2: at, y1: T, y2: H - B, class: "epoch-mark"}));
      const wide = (words.length + 1) * CHAR_PX;
      if (at + 3 >= freeFrom && at + 3 + wide <= W - R) {
        svg.append(el("svg:text", {x: at + 3, y: T + 10, class: "tick"}, words));
        freeFrom = at + 3 + wide;
      }
    }
  });
  // everything of the series is clipped to the plot (a dot's radius of room above and below
  // it, where the extreme values sit): nothing runs onto the axis labels or past the frame
  const clip = `plot-clip-${++chartCount}`;
  svg.append(el("svg:clipPath", {id: clip},
                el("svg:rect", {x: L, y: T - 4, width: W - R - L, height: H - B - T + 8})));
  const plot = el("svg:g", {"clip-path": `url(#${clip})`, class: "plot"});
  svg.append(plot);
  if (opts.line) {
    const upper = points.map((p, i) => `${x(i)},${y(p.hi)}`);
    const lower = points.map((p, i) => `${x(i)},${y(p.lo)}`).reverse();
    plot.append(el("svg:path", {d: "M" + upper.concat(lower).join(" L") + " Z", class: "band"}));
    const thickest = Math.max(...points.map(p => y(p.lo) - y(p.hi)));
    if (thickest < 3) {
      // at this scale the band is thinner than the line: say how wide it is instead
      const widest = Math.max(...points.map(p => p.hi - p.y));
      caption.append(el("span", {class: "caption-note"},
                        ` The 95% band is ±${up(widest, 0)} at most: thinner than the line `
                        + "at this scale."));
    }
    const line = points.map((p, i) => `${x(i)},${y(p.y)}`);
    plot.append(el("svg:path", {d: "M" + line.join(" L"), class: "series-line"}));
    const withC = points.map((p, i) => [p, i]).filter(([p]) => p.c !== null && p.c !== undefined);
    if (withC.length) {
      const fair = withC.map(([p, i]) => `${x(i)},${y(p.c)}`);
      plot.append(el("svg:path", {d: "M" + fair.join(" L"), class: "consistent-line"}));
    }
  } else {
    points.forEach((p, i) => {
      plot.append(el("svg:line", {x1: x(i), x2: x(i), y1: y(p.lo), y2: y(p.hi), class: "errbar"}));
      plot.append(el("svg:circle", {cx: x(i), cy: y(p.y), r: n > 120 ? 1.6 : 3, class: "point"},
                    el("svg:title", {},
                       `${p.label}: ${released(p.y)} \u00b1 ${up(p.hi - p.y, 0)}`)));
    });
  }
  return figure;
}
"""
