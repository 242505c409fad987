// The audit trail: GET /v1/admin/audit, this tenant's audited acts (key grants and revocations,
// exports, backups, restores, erasures, maintenance runs), newest first. The hash may name one
// kind (#/audit/export); acts on the whole data folder show as tenant "*".

import { get, segment } from "./api.js";
import { el, errorBox, table, when } from "./dom.js";

const KINDS = ["key", "export", "backup", "restore", "erasure", "maintenance", "projections", "rebuild"];
const LIMIT = 500;

export async function render(main, kind) {
  const wanted = KINDS.includes(kind) ? kind : "";
  const choose = el("select", { id: "audit-kind", "aria-label": "kind", on: { change: (event) => {
    location.hash = event.target.value ? `#/audit/${event.target.value}` : "#/audit";
  } } }, el("option", { value: "", selected: !wanted }, "every kind"),
  KINDS.map((k) => el("option", { value: k, selected: k === wanted }, k)));
  main.append(el("h1", {}, "Audit trail"), el("div", { class: "controls" }, el("label", { for: "audit-kind" }, "kind"), choose));
  try {
    const answer = await get(`/v1/admin/audit?limit=${LIMIT}${wanted ? `&kind=${segment(wanted)}` : ""}`);
    main.append(el("p", { class: "muted", id: "audit-count" },
      `${answer.entries.length} act${answer.entries.length === 1 ? "" : "s"}${answer.more ? `, the newest ${LIMIT}` : ""}`),
    table(["when", "tenant", "action", "by", "details"], answer.entries.map((e) => [
      when(e.at), e.tenant, el("span", { class: "mono" }, e.action), e.actor, details(e.details)]), { id: "audit" }));
  } catch (error) {
    main.append(errorBox(error));
  }
}

function details(object) {
  const shown = Object.entries(object || {}).filter(([, v]) => v !== null && v !== undefined && v !== "")
    .map(([k, v]) => `${k.replaceAll("_", " ")} ${typeof v === "object" ? JSON.stringify(v) : v}`);
  return shown.length ? shown.join(" · ") : "—";
}
