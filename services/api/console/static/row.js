// A row and its history: GET /v1/rows/{id}, every change the log recorded (observed, superseded,
// archived, restored...), with the maintenance run that made it.

import { get, segment } from "./api.js";
import { append, day, el, errorBox, keyValues, rowLink, table, threadLink, when } from "./dom.js";
import { versionNote } from "./search.js";

export async function render(main, rowId) {
  main.append(el("h1", {}, "Row ", el("span", { class: "mono" }, rowId)));
  let answer;
  try {
    answer = await get(`/v1/rows/${segment(rowId)}`);
  } catch (error) {
    main.append(errorBox(error));
    return;
  }
  const { row, history } = answer;
  append(main, [ // not main.append: that would print a null as "null"
    keyValues([
      ["date", day(row.event_time)], ["author", row.author || "unknown"], ["kind", row.kind],
      ["thread", threadLink(row.thread)], ["state", el("span", { class: `badge ${row.state}` }, row.state)],
      ["superseded by", row.superseded_by ? rowLink(row.superseded_by) : "—"],
      ["derived from", row.derived_from.length ? row.derived_from.flatMap((id) => [rowLink(id), " "]) : "—"],
      ["source", row.source ? `${row.source} ${row.source_id || ""}` : "—"],
      ["ingested", `${when(row.ingested_at)} (log position ${row.ingest_position})`],
      ["access", row.acl.length ? row.acl.join(", ") : "everyone in the tenant"],
      ["tags", row.tags.join(", ") || "—"],
    ], { id: "row-fields" }),
    versionNote(answer.version, row.superseded_by),
    row.title ? el("h3", { class: "title" }, row.title) : null,
    el("p", { class: "text", id: "row-text" }, row.text),
    el("h2", {}, "History"),
    table(["position", "at", "change", "state", "superseded by", "run", "reason"], history.map((h) => [
      String(h.position), when(h.at), h.change, h.state, h.superseded_by ? rowLink(h.superseded_by) : "",
      h.run_id ? el("a", { href: `#/runs/${encodeURIComponent(h.run_id)}`, class: "mono" }, h.run_id) : "", h.reason || ""]), { id: "history" })]);
}
