// The audit trail: GET /v1/admin/audit, this tenant's audited acts (key grants and revocations,
// exports, backups, restores, erasures, maintenance runs), newest first. The hash may name one
// kind (#/audit/export); acts on the whole data folder show as tenant "*". The server reads the
// log back from its head to the period's start, so a shorter period answers sooner.

import { get, segment } from "./api.js";
import { clear, el, errorBox, table, when } from "./dom.js";

const KINDS = ["key", "export", "backup", "restore", "erasure", "maintenance", "projections", "rebuild"];
const PERIODS = [["7", "last 7 days"], ["30", "last 30 days"], ["365", "last 365 days"], ["", "all time"]];
const LIMIT = 500;

export async function render(main, kind) {
  const wanted = KINDS.includes(kind) ? kind : "";
  const listing = el("div", { id: "audit-listing" });
  const choose = el("select", { id: "audit-kind", "aria-label": "kind", on: { change: (event) => {
    location.hash = event.target.value ? `#/audit/${event.target.value}` : "#/audit";
  } } }, el("option", { value: "", selected: !wanted }, "every kind"),
  KINDS.map((k) => el("option", { value: k, selected: k === wanted }, k)));
  const period = el("select", { id: "audit-period", "aria-label": "period", on: { change: () => load() } },
    PERIODS.map(([days, label]) => el("option", { value: days, selected: days === "30" }, label)));

  async function load() {
    const days = period.value;
    const since = days ? `&since=${segment(new Date(Date.now() - Number(days) * 86400000).toISOString())}` : "";
    let shown;
    try {
      const answer = await get(`/v1/admin/audit?limit=${LIMIT}${since}${wanted ? `&kind=${segment(wanted)}` : ""}`);
      const count = answer.entries.length;
      shown = [el("p", { class: "muted", id: "audit-count" },
        `${count} act${count === 1 ? "" : "s"}${answer.more ? `, the newest ${LIMIT}` : ""}`),
      table(["when", "tenant", "action", "by", "details"], answer.entries.map((e) => [
        when(e.at), e.tenant, el("span", { class: "mono" }, e.action), e.actor, details(e.details)]), { id: "audit" })];
    } catch (error) {
      shown = [errorBox(error)];
    }
    if (listing.isConnected) clear(listing).append(...shown); // not if the page was left meanwhile
  }

  main.append(el("h1", {}, "Audit trail"), el("div", { class: "controls" },
    el("label", { for: "audit-kind" }, "kind"), choose, el("label", { for: "audit-period" }, "period"), period), listing);
  await load();
}

function details(object) {
  const shown = Object.entries(object || {}).filter(([, v]) => v !== null && v !== undefined && v !== "")
    .map(([k, v]) => `${k.replaceAll("_", " ")} ${typeof v === "object" ? JSON.stringify(v) : v}`);
  return shown.length ? shown.join(" · ") : "—";
}
