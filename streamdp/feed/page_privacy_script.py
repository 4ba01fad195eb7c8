"""The feed page's privacy wording: each stream's own loss, and per input source the loss of
one event (or one unit) across every stream reading it.

JavaScript spliced into :data:`streamdp.feed.page_script.SCRIPT` (it uses that script's
``el``). The figures come computed in ``feed.json`` (:mod:`streamdp.feed.privacy_loss`); the
script only words them. A privacy loss is never shown smaller than it is: the page's ``up``
rounds it outward.
"""

from __future__ import annotations

PRIVACY_SCRIPT = r"""
// "a", "a and b", "a, b and c"
function words(names) {
  return names.length < 2 ? names.join("") : `${names.slice(0, -1).join(", ")} and ${names.at(-1)}`;
}
// a budget in words: "ε = 1", or "ρ = 0.5, that is (ε, δ) = (7.287, 1e-10)"; ``parts``
// (" (0.25 + 0.5)", the streams' shares) follows the figure it adds up to
function lossWords(loss, parts = "") {
  return loss.rho === undefined || loss.rho === null ? `\u03b5 = ${up(loss.epsilon, 6)}${parts}`
    : `\u03c1 = ${up(loss.rho, 6)}${parts}, that is (\u03b5, \u03b4) = (${up(loss.epsilon, 3)}, `
      + `${loss.delta})`;
}

// One stream's own privacy loss, said as what it is: this stream alone, per event or per
// unit per epoch, and summed over its epochs.
function streamLoss(stream) {
  const perUnit = stream.protects && stream.protects !== "event";
  const field = perUnit ? stream.protects.replace(/ per epoch$/, "") : null;
  const zcdp = stream.rho_per_epoch && stream.rho_per_epoch.length ? stream.rho_per_epoch : null;
  const level = perUnit ? `per ${stream.protects}` : "per event";
  const epochs = zcdp
    ? zcdp.map(e => `epoch ${e.epoch}: ` + lossWords({
        rho: e.rho, delta: e.delta,
        epsilon: stream.epsilon_per_epoch.find(p => p.epoch === e.epoch).epsilon}))
    : stream.epsilon_per_epoch.map(e => `epoch ${e.epoch}: ${lossWords(e)}`);
  const summed = zcdp
    ? lossWords({rho: stream.rho_sum_over_epochs, epsilon: stream.rho_sum_over_epochs_epsilon,
                 delta: Math.min(...zcdp.map(e => e.delta))})
    : lossWords({epsilon: stream.epsilon_sum_over_epochs});
  const who = perUnit ? `one ${field} present in every epoch` : "one event in each epoch";
  const source = stream.source
    ? ` It reads source ${stream.source}; streams reading one source add up: see `
      + "\u201cPrivacy loss by source\u201d."
    : " Its records do not name their input source; streams reading one source add up.";
  return `Privacy loss through this stream alone (${level}`
    + (zcdp ? ", zero-concentrated DP" : "") + `): ${epochs.join("; ") || "\u2013"}. `
    + `Summed over its epochs (${who}): ${summed}.` + source;
}

// Per input source, what one event (and one unit) can lose across all streams reading it.
function sourcesSection(feed) {
  const box = el("section", {id: "privacy-sources"});
  const sources = feed.sources || [];
  if (!sources.length) return box;
  box.append(el("h2", {}, "Privacy loss by source"));
  for (const s of sources) {
    const parts = s.streams.map(m => up(m.budget, 6)).join(" + ");
    const sum = s.streams.length > 1 ? ` (${parts})` : "";
    const names = words(s.streams.map(m => m.stream));
    let text = `Source ${s.source}, read by ${names}: `;
    const insecure = s.streams.filter(m => {
      const shown = feed.streams.find(x => x.stream === m.stream);
      return shown && !shown.noise_secure;
    }).map(m => m.stream);
    if (s.unit) {
      text += `one ${s.unit.field} whose records fall in one epoch of each stream can lose `
        + `${lossWords(s.unit.per_epoch, sum)}; over all epochs released so far, `
        + `${lossWords(s.unit.lifetime)}.`;
    } else {
      text += "one event is counted in one epoch of each stream, so it can lose "
        + `${lossWords(s.event, sum)}.`;
      const events = s.streams.filter(m => m.protects === "event").map(m => m.stream);
      if (s.unit_fields.length) {
        text += ` A ${s.unit_fields.join(" or ")} with several records has no bound here: `
          + (events.length ? `${words(events)} protect${events.length > 1 ? "" : "s"} `
                             + "one event only."
                           : "its streams bound different fields.");
      } else {
        text += " A person with several events can lose more.";
      }
    }
    if (insecure.length) {
      text += ` NOT PRIVATE: ${words(insecure)} drew ${insecure.length > 1 ? "their" : "its"} `
        + "noise with a test sampler, so these figures do not hold for "
        + `${insecure.length > 1 ? "them" : "it"}.`;
    }
    box.append(el("p", {class: "facts", "data-source": s.source}, text));
  }
  return box;
}
"""
