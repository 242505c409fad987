// Stats and indexer lag: GET /v1/stats (the tenant's row counts) and /readyz (log head, applied
// position, lag, storage), refreshed every two seconds while the page is open; a link to the
// tenant's audit trail (audit.js).

import { get } from "./api.js";
import { clear, el, errorBox, keyValues, table } from "./dom.js";

let timer = null;

export function stop() {
  clearTimeout(timer);
  timer = null;
}

export async function render(main) {
  const body = el("div", { id: "stats" });
  main.append(el("h1", {}, "Stats and indexer lag"),
    el("p", {}, el("a", { href: "#/audit", id: "audit-link" }, "Audit trail"),
      el("span", { class: "muted" }, ": who granted and revoked keys, exported, backed up, restored, erased")),
    body);
  const tick = async () => {
    const parts = [];
    try {
      const [stats, ready] = await Promise.all([get("/v1/stats"), get("/readyz", { ok: [503] })]);
      const lag = Math.max(ready.lag, 0);
      parts.push(el("section", { class: "card" }, el("h2", {}, "Indexer"),
        keyValues([
          ["status", el("span", { class: `badge ${ready.status}`, id: "ready-status" }, ready.status)],
          ["log head", String(ready.log_head)], ["applied position", String(ready.applied_position)],
          ["lag (events)", el("span", { id: "lag" }, String(lag))],
          ["indexed", el("meter", { min: 0, max: Math.max(ready.log_head, 1), value: ready.applied_position })],
          ["paused", ready.indexer_paused ? "yes" : "no"],
          ready.reason ? ["reason", ready.reason] : null,
          ready.storage ? ["free space", `${ready.storage.free_bytes ?? "?"} bytes (floor ${ready.storage.min_free_bytes})`] : null,
        ].filter(Boolean))));
      parts.push(el("section", { class: "card" }, el("h2", {}, "Rows of this tenant"),
        table(["count", "rows"], Object.entries(stats.rows).map(([k, v]) => [k, String(v)]), { id: "row-counts" })));
    } catch (error) {
      parts.push(errorBox(error));
    }
    if (!body.isConnected) return; // the page was left while the answer came
    clear(body).append(el("div", { class: "columns" }, parts));
    timer = setTimeout(tick, 2000);
  };
  stop();
  await tick();
}
