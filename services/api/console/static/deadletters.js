// Connectors' dead letters: GET /v1/connectors/dead-letters, the items of this tenant's connector
// runs that could not be read, with the reason, newest first.

import { get } from "./api.js";
import { el, errorBox, table, when } from "./dom.js";

export async function render(main) {
  main.append(el("h1", {}, "Dead letters"));
  try {
    const answer = await get("/v1/connectors/dead-letters?limit=500");
    main.append(el("p", { class: "muted", id: "dead-letter-count" },
      `${answer.total} item${answer.total === 1 ? "" : "s"} could not be read${answer.total > answer.dead_letters.length ? `; the newest ${answer.dead_letters.length} are listed` : ""}`),
    table(["when", "connector", "path", "reason"], answer.dead_letters.map((d) => [
      when(d.at), d.connector, el("span", { class: "mono" }, d.path), d.reason]), { id: "dead-letters" }));
  } catch (error) {
    main.append(errorBox(error));
  }
}
