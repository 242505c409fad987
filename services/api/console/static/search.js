// Search: POST /v1/query with an as-of slider and a known-at control.
//
// The slider spans the dates of the answer to the question without an as-of bound (the earliest
// dated hit to the latest), one step per day, and one step past the end that means "now" (no
// bound; undated rows count then). Moving it asks again as of the end of the chosen day (UTC),
// so an older version of a decision comes back once the newer one is after the date.

import { post } from "./api.js";
import { clear, day, el, errorBox, rowLink, threadLink, when } from "./dom.js";

const DAY_MS = 86_400_000;
const LEGS = ["lex", "tag", "vec"];
const state = { q: "", k: 10, knownAt: null, firstDay: 0, lastDay: 0, dates: [] };
let asked = 0; // requests sent; only the latest one's answer is shown

export function render(main) {
  const q = el("input", { id: "q", type: "search", placeholder: "What did we decide about…", required: true,
    value: state.q, "aria-label": "question" });
  const k = el("input", { id: "k", type: "number", min: 1, max: 200, value: state.k, "aria-label": "rows" });
  const knownAt = el("input", { id: "known-at", type: "datetime-local", step: 1, "aria-label": "known at" });
  const slider = el("input", { id: "as-of", type: "range", min: 0, max: 0, step: 1, value: 0, disabled: true,
    "aria-label": "as of", list: "as-of-ticks" });
  const ticks = el("datalist", { id: "as-of-ticks" });
  const asOfLabel = el("output", { id: "as-of-label", for: "as-of" }, "now");
  const chips = el("div", { class: "chips", id: "as-of-dates" });
  const status = el("p", { id: "search-status", class: "muted" });
  const results = el("div", { id: "results" });

  const asOf = () => (Number(slider.value) >= Number(slider.max) || slider.disabled ? null
    : new Date(Number(slider.value) * DAY_MS + DAY_MS - 1).toISOString());
  const showAsOf = () => { asOfLabel.value = asOf() ? `as of ${day(asOf())}` : "now (no as-of bound)"; };

  async function ask({ newQuestion }) {
    state.q = q.value.trim();
    state.k = Number(k.value) || 10;
    state.knownAt = knownAt.value ? new Date(knownAt.value).toISOString() : null;
    if (!state.q) return;
    const body = { q: state.q, k: state.k, show_supersession: true };
    if (state.knownAt) body.known_at = state.knownAt;
    if (!newQuestion && asOf()) body.as_of = asOf();
    status.textContent = "searching…";
    const mine = ++asked;
    try {
      const answer = await post("/v1/query", body);
      if (mine !== asked) return; // a later question (or slider move) is on its way: its answer counts
      if (newQuestion) setRange(answer.rows);
      showAnswer(answer, body);
    } catch (error) {
      if (mine !== asked) return;
      status.textContent = "";
      clear(results).append(errorBox(error));
    }
  }

  function setRange(rows) {
    const dates = [...new Set(rows.map((r) => r.date && day(r.date)).filter(Boolean))].sort();
    state.dates = dates;
    clear(ticks);
    clear(chips);
    if (!dates.length) {
      slider.disabled = true;
      showAsOf();
      return;
    }
    state.firstDay = dayIndex(dates[0]);
    state.lastDay = dayIndex(dates[dates.length - 1]);
    slider.min = state.firstDay;
    slider.max = state.lastDay + 1;
    slider.value = slider.max;
    slider.disabled = false;
    for (const date of dates) {
      ticks.append(el("option", { value: dayIndex(date) }));
      chips.append(el("button", { type: "button", class: "chip", "data-date": date,
        on: { click: () => { slider.value = dayIndex(date); showAsOf(); ask({ newQuestion: false }); } } }, date));
    }
    chips.append(el("button", { type: "button", class: "chip", "data-date": "now",
      on: { click: () => { slider.value = slider.max; showAsOf(); ask({ newQuestion: false }); } } }, "now"));
    showAsOf();
  }

  function showAnswer(answer, body) {
    const bounds = [body.as_of ? `as of ${day(body.as_of)}` : "now", body.known_at ? `known at ${when(body.known_at)}` : null];
    status.textContent = `${answer.rows.length} of ${answer.matched} matching rows · ${bounds.filter(Boolean).join(" · ")}`;
    clear(results);
    if (!answer.rows.length) results.append(el("p", { class: "muted" }, "No row matches in this scope."));
    for (const hit of answer.rows) results.append(hitCard(hit));
    results.append(el("details", { class: "evidence" }, el("summary", {}, "Rendered evidence (what a model reads)"),
      el("pre", { id: "evidence" }, answer.evidence)));
  }

  const form = el("form", { class: "search", on: { submit: (e) => { e.preventDefault(); ask({ newQuestion: true }); } } },
    q, el("label", { for: "k" }, "rows"), k, el("button", { type: "submit" }, "Search"));
  const controls = el("div", { class: "controls" },
    el("div", { class: "slider" }, el("label", { for: "as-of" }, "As of"), slider, ticks, asOfLabel),
    chips,
    el("div", { class: "known-at" }, el("label", { for: "known-at" }, "Known at (your local time)"), knownAt,
      el("button", { type: "button", id: "known-at-clear", on: { click: () => { knownAt.value = ""; ask({ newQuestion: false }); } } }, "clear")));
  slider.addEventListener("input", showAsOf);
  slider.addEventListener("change", () => ask({ newQuestion: false }));
  knownAt.addEventListener("change", () => ask({ newQuestion: false }));
  main.append(el("h1", {}, "Search"), form, controls, status, results);
  if (state.q) ask({ newQuestion: true });
  q.focus();
}

function dayIndex(date) {
  return Math.floor(Date.parse(`${date}T00:00:00Z`) / DAY_MS);
}

function hitCard(hit) {
  const legs = LEGS.map((leg) => el("span", { class: "leg", "data-leg": leg, title: `rank in the ${leg} leg (#1 is its best; – not found by it)` },
    `${leg} ${hit.leg_ranks[leg] !== undefined ? `#${hit.leg_ranks[leg] + 1}` : "–"}`)); // ranks count from 0
  return el("article", { class: "hit", "data-row-id": hit.row_id },
    el("header", {},
      el("span", { class: "rank" }, `#${hit.rank}`),
      el("span", { class: "date" }, day(hit.date)),
      el("span", { class: "author" }, hit.author || "unknown author"),
      el("span", { class: "kind" }, hit.kind),
      threadLink(hit.thread),
      rowLink(hit.row_id)),
    hit.title ? el("h3", { class: "title" }, hit.title) : null,
    versionNote(hit.version, hit.superseded_by),
    el("p", { class: "text" }, hit.text),
    el("footer", {}, el("span", { class: "reason" }, hit.reason), legs,
      el("span", { class: "score" }, `fused ${hit.fused_score.toFixed(4)}`)));
}

// The version of a hit: the query's `version` (its place in its thread, what came next, what
// contradicts it) when the server sends one, else its `superseded_by` alone.
export function versionNote(version, supersededBy) {
  const contradicted = version && version.contradicted_by && version.contradicted_by.length;
  if (version && typeof version === "object" && (version.count > 1 || contradicted)) {
    const parts = [`version ${version.index} of ${version.count}`];
    if (version.superseded_by) {
      parts.push(" · superseded by ", rowLink(version.superseded_by),
        version.superseded_on ? ` on ${day(version.superseded_on)}` : "");
    } else if (version.count > 1) {
      parts.push(" · the latest");
    }
    if (contradicted) {
      parts.push(" · contradicted by ", version.contradicted_by.flatMap((id) => [rowLink(id), " "]));
    }
    return el("p", { class: `version${version.superseded_by ? " superseded" : ""}` }, parts);
  }
  if (version) return null; // the only version of its thread, and nothing contradicts it
  if (supersededBy) return el("p", { class: "version superseded" }, "superseded by ", rowLink(supersededBy));
  return null;
}
