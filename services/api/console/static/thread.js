// A thread's timeline: GET /v1/threads/{id}, every version in date order with its author, state
// and supersession, what each changed from the one before, and a word diff of any two versions.

import { get, segment } from "./api.js";
import { clear, day, el, errorBox, rowLink } from "./dom.js";
import { wordCounts, wordDiff } from "./diff.js";
import { versionNote } from "./search.js";

export async function render(main, threadId) {
  main.append(el("h1", {}, "Thread ", el("span", { class: "mono" }, threadId)));
  let thread;
  try {
    thread = await get(`/v1/threads/${segment(threadId)}`);
  } catch (error) {
    main.append(errorBox(error));
    return;
  }
  const rows = thread.rows;
  const label = (row, i) => `v${i + 1} · ${day(row.event_time)} · ${row.author || "unknown"}`;
  const timeline = el("ol", { class: "timeline", id: "timeline" });
  rows.forEach((row, i) => {
    const previous = rows[i - 1];
    const change = previous ? wordCounts(wordDiff(previous.text, row.text)) : null;
    timeline.append(el("li", { class: `entry state-${row.state}${row.superseded_by ? " superseded" : ""}`, "data-row-id": row.row_id },
      el("header", {},
        el("span", { class: "rank" }, `v${i + 1}`),
        el("span", { class: "date" }, day(row.event_time)),
        el("span", { class: "author" }, row.author || "unknown author"),
        el("span", { class: "kind" }, row.kind),
        el("span", { class: `badge ${row.state}` }, row.state),
        row.superseded_by && !(thread.versions || {})[row.row_id]
          ? el("span", { class: "badge superseded" }, "superseded by ", rowLink(row.superseded_by)) : null,
        row.derived_from.length ? el("span", { class: "badge" }, `merged from ${row.derived_from.length}`) : null,
        rowLink(row.row_id)),
      versionNote((thread.versions || {})[row.row_id], null),
      el("p", { class: "change" }, change
        ? `${row.author || "unknown"} changed ${change.added} words in, ${change.removed} out from v${i}`
        : `${row.author || "unknown"} started the thread`),
      row.title ? el("h3", { class: "title" }, row.title) : null,
      el("p", { class: "text" }, row.text)));
  });

  const pick = (id, selected) => el("select", { id, "aria-label": id },
    rows.map((row, i) => el("option", { value: i, selected: i === selected }, label(row, i))));
  const from = pick("diff-from", Math.max(rows.length - 2, 0));
  const to = pick("diff-to", rows.length - 1);
  const output = el("div", { id: "diff", class: "diff" });
  const compare = () => showDiff(output, rows[Number(from.value)], rows[Number(to.value)]);
  from.addEventListener("change", compare);
  to.addEventListener("change", compare);
  main.append(el("p", { class: "muted" }, `${rows.length} version${rows.length === 1 ? "" : "s"}, oldest first`), timeline,
    el("h2", {}, "Compare two versions"),
    el("div", { class: "controls" }, el("label", { for: "diff-from" }, "from"), from,
      el("label", { for: "diff-to" }, "to"), to, el("button", { type: "button", id: "diff-show", on: { click: compare } }, "Show diff")),
    output);
  compare();
}

function showDiff(output, before, after) {
  const parts = wordDiff(before.text, after.text);
  const { added, removed } = wordCounts(parts);
  clear(output).append(
    el("p", { class: "muted" }, `${removed} words removed, ${added} added`),
    el("p", { class: "text diff-text" }, parts.map((part) =>
      part.op === "same" ? part.text : el(part.op === "add" ? "ins" : "del", {}, part.text))));
}
