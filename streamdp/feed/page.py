"""The feed page: one self-contained HTML document (no external scripts, fonts or styles).

The data the page draws is embedded in it (``<script type="application/json" id="feed-data">``),
so a static copy opens from disk; served over HTTP the page polls ``version.json`` every few
seconds and fetches ``feed.json`` and redraws when the feed's version changed. The charts are
inline SVG drawn by the page's script (:mod:`streamdp.feed.page_script`) with DOM calls only
(record strings are set as text, never parsed as HTML).
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
from typing import Any

from streamdp.feed.page_script import page_script

_STYLE = """
body { font: 15px/1.45 system-ui, sans-serif; margin: 1.5em auto; max-width: 1100px;
       color: #1d2733; padding: 0 1em; overflow-wrap: anywhere; }
@media (max-width: 600px) { body { font-size: 14px; padding: 0 .5em; margin-top: .8em; } }
h1 { font-size: 1.6em; margin-bottom: .2em; }
h2 { border-top: 2px solid #c9d3de; padding-top: .6em; margin-top: 1.6em; }
.facts { color: #394b5e; }
.description { white-space: pre-line; max-width: 60em; }
.warning { background: #fde2e1; border: 1px solid #c0392b; padding: .4em .7em; }
.explain { background: #f2f5f8; padding: .5em 1em; border-radius: 4px; }
.explain dt { font-weight: 600; }
.table-wrap { overflow-x: auto; max-width: 100%; }
/* a table wider than its box (page script: tableWrap): a note over it and, while columns are
   hidden on the right, a shadow at that edge (the white cover scrolls with the table and hides
   the shadow once its last column is in view) */
.table-wrap.scrolls {
  background: linear-gradient(to left, rgba(255, 255, 255, 0), #fff 1.2em) right / 2.4em 100%
                no-repeat local,
              linear-gradient(to left, rgba(29, 39, 51, .3), rgba(29, 39, 51, 0)) right / 1em
                100% no-repeat scroll;
}
.table-wrap.scrolls::before { content: "Scroll the table sideways for more columns \\2192";
  display: block; position: sticky; left: 0; font-size: .85em; color: #5d6b7a; }
table { border-collapse: collapse; margin: .6em 0; }
th, td { padding: .2em .7em; text-align: right; border-bottom: 1px solid #dde3ea;
         white-space: nowrap; }
/* narrow: column titles wrap, so most tables fit a phone; a wider one scrolls (above) */
@media (max-width: 600px) {
  th, td { padding: .2em .35em; } th { white-space: normal; overflow-wrap: normal; }
}
select { max-width: 100%; }
@media print { #status, select { display: none; } .chart { break-inside: avoid; } }
th:first-child, td:first-child { text-align: left; }
svg { background: #fbfcfd; border: 1px solid #dde3ea; display: block; }
.band { fill: #9cc3e6; fill-opacity: .45; stroke: none; }
.series-line { fill: none; stroke: #1f5f99; stroke-width: 1.6; }
.consistent-line { fill: none; stroke: #c0392b; stroke-width: 1.4; stroke-dasharray: 5 3; }
.point { fill: #1f5f99; }
.errbar { stroke: #7fa9cf; stroke-width: 1; }
.zero { stroke: #6b7785; stroke-width: 1; stroke-dasharray: 2 2; }
.epoch-mark { stroke: #8e6bb0; stroke-width: 1; stroke-dasharray: 4 3; }
.marginals { display: flex; flex-wrap: wrap; gap: 0 1.5em; }
.marginal { min-width: 0; max-width: 100%; }
.marginal h4 { margin: .6em 0 0; }
.axis { stroke: #6b7785; stroke-width: 1; }
.tick { font-size: 11px; fill: #394b5e; }
.chart { margin: .3em 0 1em; }
.chart figcaption { font-size: .9em; color: #1d2733; margin-bottom: .2em; }
.caption-note { color: #5d6b7a; }
#status { color: #5d6b7a; font-size: .9em; }
button.link { background: none; border: 0; padding: 0; font: inherit; color: #1f5f99;
              text-decoration: underline; cursor: pointer; text-align: left; }
.places-table tr.chosen td { background: #eef3f8; }
.place-search { font: inherit; max-width: 100%; width: 16em; }
"""

_BODY = """
<h1>Released statistics</h1>
<p class="facts">Read from <span id="source"></span>.
Downloads of everything shown: <a href="feed.json" download>feed.json</a>,
<a href="releases.csv" download>releases.csv</a> (noisy counts and running totals with their
standard deviations and 95% half-widths), <a href="consistent.csv" download>consistent.csv</a>
(latest consistent values).</p>
<p id="status"></p>
<p>Every value below is noisy on purpose (differential privacy); the bands are 95%
intervals and negative counts come from the noise: see
<a href="#how">how to read these numbers</a>.</p>
<div id="sources"></div>
<div id="streams"></div>
<h2 id="how">How to read these numbers</h2>
<dl class="explain">
<dt>What a release is</dt>
<dd>At the close of each period (a day, a month) every counter publishes a noisy count of that
period and a noisy running total since the stream began. Noise is added on purpose, so that no
single event can be told from the numbers (differential privacy; a stream that protects a
person says so). Streams reading the same input source add up: an event counted by two streams
can lose the sum of their budgets (see <a href="#privacy-sources">privacy loss by source</a>).
Once published, a release never changes.</dd>
<dt>The values are noisy</dt>
<dd>Every value is the true value plus random noise of known size (its standard deviation is
published with it). The noise averages out: the values are unbiased estimates of what the
stream counts. A stream that protects a person counts each person's records only up to its
bounds (records beyond them are not counted), so its true value is that of the records it
admitted; the <code>blt</code> mechanism adds a tiny bounded rounding bias, included in its
standard deviation.</dd>
<dt>The 95% band</dt>
<dd>The shaded band and the bars are value &plusmn; (2.12 &times; standard deviation + 1): the
true value lies inside with about 95% probability. Half-widths written as numbers are
rounded up, never down.</dd>
<dt>Negative counts</dt>
<dd>A count below zero, or a running total that goes down, comes from the noise, not from the
data. Values are not clipped: clipping would bias every sum built on them.</dd>
<dt>Consistent values</dt>
<dd>Revisions combine all releases so far into estimates that satisfy the stream's public
constraints (for example, parts adding up to wholes). They are post-processing: no extra privacy
loss, and their error is at most that of the release of the same period (where the records
carry their own standard deviation, the table shows their own 95% band).</dd>
<dt>Epochs, &epsilon;, &rho; and &delta;</dt>
<dd>A stream's budget pays for a fixed number of periods, an epoch; the next epoch starts a
fresh budget and carries the last running total over. &epsilon; (epsilon) is the privacy loss
of pure differential privacy: the smaller, the less any one event (or person) can change what
is published. A stream under zero-concentrated DP states its loss as &rho; (rho), and also as
the (&epsilon;, &delta;) it implies: &epsilon; holds except with probability up to &delta;.
Losses of streams reading the same source, and of one person's epochs, add up.</dd>
</dl>
"""


def _source_hash(text: str) -> str:
    """A CSP source expression allowing exactly the inline element whose content is ``text``."""
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    return f"'sha256-{base64.b64encode(digest).decode('ascii')}'"


@functools.cache
def content_security_policy() -> str:
    """The page's Content-Security-Policy: its own inline script and style (by hash) and
    nothing else, fetches from its own origin only (``feed.json``, ``version.json``, the
    places' series), no frames, forms or base URL. The page escapes what it shows (no markup
    from a record ever becomes markup); the policy is the second wall, should that ever break
    (security audit of 2026-11-28). The server also sends ``frame-ancestors 'none'``, which a
    ``<meta>`` policy cannot carry."""
    return (
        f"default-src 'none'; script-src {_source_hash(page_script())}; "
        f"style-src {_source_hash(_STYLE)}; connect-src 'self'; img-src 'self'; "
        "base-uri 'none'; form-action 'none'"
    )


def render_page(document: dict[str, Any]) -> str:
    """The whole page with ``document`` (:meth:`FeedView.document`) embedded as its data."""
    # no "<" inside the script element ("</script>", "<!--" in a record's text would end or
    # bend it): every one escaped the JSON way, which JSON.parse reads back unchanged
    data = json.dumps(document, separators=(",", ":")).replace("<", "\\u003c")
    script = page_script()
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<meta http-equiv="Content-Security-Policy" content="{content_security_policy()}">'
        "<title>Released statistics (differentially private)</title>"
        f"<style>{_STYLE}</style></head><body>{_BODY}"
        f'<script type="application/json" id="feed-data">{data}</script>'
        f"<script>{script}</script></body></html>\n"
    )
