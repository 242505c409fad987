// Maintenance runs: start consolidation or MemRefine with its settings, watch a run's progress
// by polling GET runs/{id}, read the decisions it made, revert it.

import { get, post, segment } from "./api.js";
import { clear, el, errorBox, keyValues, rowLink, table, when } from "./dom.js";

const BASE = "/v1/admin/maintenance";
const DONE = new Set(["finished", "failed", "reverted"]);
let poller = null;

export function stop() {
  clearTimeout(poller);
  poller = null;
}

export async function render(main, runId) {
  const live = el("section", { id: "run-live", class: "card" }, el("p", { class: "muted" }, "No run started from this page yet."));
  const decisions = el("section", { id: "decisions" });
  const list = el("section", { id: "runs" });
  const message = el("div", { id: "runs-message" });

  const field = (id, label, attrs) => el("div", { class: "field" }, el("label", { for: id }, label), el("input", { id, ...attrs }));
  const value = (id) => document.getElementById(id).value.trim();
  const number = (id) => (value(id) === "" ? undefined : Number(value(id)));

  async function start(job, body) {
    clear(message);
    try {
      const accepted = await post(`${BASE}/${job}`, body);
      watch(accepted.run_id);
    } catch (error) {
      message.append(errorBox(error));
    }
  }

  function watch(runId, then) {
    stop();
    const tick = async () => {
      if (!live.isConnected) return; // the page was left
      try {
        const run = await get(`${BASE}/runs/${segment(runId)}`);
        showLive(run);
        if (DONE.has(run.status)) {
          await refresh();
          if (then) then(run);
          return;
        }
      } catch (error) {
        clear(live).append(errorBox(error));
        return;
      }
      poller = setTimeout(tick, 400);
    };
    tick();
  }

  function showLive(run) {
    clear(live).append(
      el("h2", {}, `${run.job} run `, el("span", { class: "mono", id: "live-run-id" }, run.run_id)),
      el("p", {}, "status ", el("span", { class: `badge ${run.status}`, id: "live-status" }, run.status)),
      keyValues([["settings", pairs(run.params)],
        ["progress", [run.progress.fraction_done !== undefined && !DONE.has(run.status)
          ? el("progress", { max: 1, value: run.progress.fraction_done, id: "live-progress" }) : null, " ", pairs(run.progress)]],
        ["summary", pairs(run.summary)], ["decision events", String(run.events)],
        ["judge", run.judge || "—"], ["requested by", run.requested_by]]));
  }

  async function showDecisions(run) {
    clear(decisions).append(el("h2", {}, "Decisions of ", el("span", { class: "mono" }, run.run_id)));
    try {
      const answer = await get(`${BASE}/runs/${segment(run.run_id)}/decisions`);
      decisions.append(el("p", { class: "muted" }, `${answer.total} decision event${answer.total === 1 ? "" : "s"}`),
        table(["change", "row", "superseded by", "made from", "reason"], answer.decisions.map((d) => [
          d.change, rowLink(d.row_id), d.superseded_by ? rowLink(d.superseded_by) : "",
          d.sources.flatMap((id) => [rowLink(id), " "]), d.reason]), { id: "decision-table" }));
      decisions.scrollIntoView({ block: "end" });
    } catch (error) {
      decisions.append(errorBox(error));
    }
  }

  async function revert(run) {
    clear(message);
    try {
      const accepted = await post(`${BASE}/runs/${segment(run.run_id)}/revert`);
      watch(accepted.run_id);
    } catch (error) {
      message.append(errorBox(error));
    }
  }

  async function refresh() {
    try {
      const { runs } = await get(`${BASE}/runs`);
      clear(list).append(el("h2", {}, "Runs of this tenant"), table(
        ["run", "job", "status", "started", "events", "summary", ""],
        runs.slice().reverse().map((run) => [
          el("span", { class: "mono" }, run.run_id), run.job,
          el("span", { class: `badge ${run.status}`, "data-run-status": run.run_id }, run.status),
          when(run.started_at), String(run.events), summaryLine(run),
          el("span", { class: "actions" },
            el("button", { type: "button", "data-decisions": run.run_id, on: { click: () => showDecisions(run) } }, "decisions"),
            el("button", { type: "button", "data-watch": run.run_id, on: { click: () => watch(run.run_id) } }, "watch"),
            run.job !== "revert" && run.status === "finished"
              ? el("button", { type: "button", "data-revert": run.run_id, on: { click: () => revert(run) } }, "revert") : null),
        ]), { id: "runs-table" }));
    } catch (error) {
      clear(list).append(errorBox(error));
    }
  }

  const consolidate = el("form", { class: "card", id: "consolidate-form", on: { submit: (e) => {
    e.preventDefault();
    start("consolidate", { tau: number("tau"), max_calls: number("c-max-calls") });
  } } }, el("h2", {}, "Consolidate"),
  el("p", { class: "muted" }, "Groups rows that say the same, supersedes the older of a changed fact, archives restatements."),
  field("tau", "cosine to a group's first row (τ)", { type: "number", step: "0.01", min: "0.01", max: "1", value: "0.85" }),
  field("c-max-calls", "at most this many groups judged", { type: "number", min: "0", placeholder: "no limit" }),
  el("button", { type: "submit", id: "start-consolidate" }, "Start consolidation"));

  const refine = el("form", { class: "card", id: "refine-form", on: { submit: (e) => {
    e.preventDefault();
    const body = { max_calls: number("r-max-calls"), min_similarity: number("min-similarity"),
      use_cache: document.getElementById("use-cache").checked };
    if (value("budget-bytes")) body.budget_bytes = number("budget-bytes");
    else body.budget_fraction = number("budget-fraction");
    start("refine", body);
  } } }, el("h2", {}, "Refine (MemRefine)"),
  el("p", { class: "muted" }, "Merges and deletes near-copies until the store fits a budget."),
  field("budget-fraction", "budget: fraction of the active size", { type: "number", step: "0.05", min: "0.05", max: "1", value: "0.7" }),
  field("budget-bytes", "or budget in bytes", { type: "number", min: "0", placeholder: "use the fraction" }),
  field("r-max-calls", "at most this many pairs judged", { type: "number", min: "0", placeholder: "no limit" }),
  field("min-similarity", "pairs below this cosine are never proposed", { type: "number", step: "0.05", min: "-1", max: "1", value: "0" }),
  el("div", { class: "field" }, el("label", { for: "use-cache" }, "skip pairs an earlier run preserved"),
    el("input", { id: "use-cache", type: "checkbox", checked: true })),
  el("button", { type: "submit", id: "start-refine" }, "Start refine"));

  main.append(el("h1", {}, "Maintenance"), el("div", { class: "columns" }, consolidate, refine), message, live, decisions, list);
  await refresh();
  if (runId) { // opened from a row's history: that run, and what it decided
    watch(runId);
    showDecisions({ run_id: runId });
  }
}

function summaryLine(run) {
  const s = run.summary || {};
  if (s.error) return `error: ${s.error}`;
  if (s.reverts) return `reverts ${s.reverts}`;
  const parts = [];
  const picked = Object.fromEntries(["stop_reason", "decisions", "labels", "realised_bytes", "target_bytes"]
    .filter((key) => s[key] !== undefined).map((key) => [key, s[key]]));
  if (Object.keys(picked).length) parts.push(pairs(picked));
  if (run.reverted_by) parts.push(`reverted by ${run.reverted_by}`);
  return parts.join(" · ");
}

// A run's settings, progress or summary as "name value" pairs; nulls left out, nested counts inline.
function pairs(object) {
  const shown = Object.entries(object || {}).filter(([, v]) => v !== null && v !== undefined)
    .map(([k, v]) => `${k.replaceAll("_", " ")} ${typeof v === "object"
      ? Object.entries(v).map(([a, b]) => `${a} ${typeof b === "object" ? JSON.stringify(b) : b}`).join(", ") : v}`);
  return shown.length ? shown.join(" · ") : "—";
}
