// The people directory: GET /v1/people (the persons met in rows this key may read, with a name or
// alias prefix) and GET /v1/people/{id} (their rows by role, newest first, only readable rows).
// The hash holds a person id (#/people/p-...), never a name.

import { get, segment } from "./api.js";
import { append, clear, day, el, errorBox, keyValues, rowLink, table, threadLink } from "./dom.js";

const LIMIT = 200;

export async function render(main, personId) {
  if (personId) {
    await person(main, personId);
    return;
  }
  const listing = el("div", { id: "people-listing" });
  const prefix = el("input", { id: "people-q", type: "search", placeholder: "name or address prefix",
    "aria-label": "name or address prefix" });
  const form = el("form", { class: "controls", id: "people-form", on: { submit: (event) => {
    event.preventDefault();
    load();
  } } }, prefix, el("button", { type: "submit" }, "Find"));

  async function load() {
    const q = prefix.value.trim();
    let shown;
    try {
      const answer = await get(`/v1/people?limit=${LIMIT}${q ? `&q=${segment(q)}` : ""}`);
      const count = answer.people.length;
      shown = [el("p", { class: "muted", id: "people-count" },
        `${count} ${count === 1 ? "person" : "people"}${answer.next_offset !== null ? `, the first ${LIMIT}` : ""}`),
      table(["name", "rows by role", "aliases"], answer.people.map((p) => [
        el("a", { href: `#/people/${encodeURIComponent(p.person_id)}`, "data-person-id": p.person_id }, p.display_name),
        roles(p.roles), p.aliases.join(", ")]), { id: "people" })];
    } catch (error) {
      shown = [errorBox(error)];
    }
    if (listing.isConnected) clear(listing).append(...shown); // not if the page was left meanwhile
  }

  main.append(el("h1", {}, "People"), form, listing);
  await load();
}

async function person(main, personId) {
  let answer;
  try {
    answer = await get(`/v1/people/${segment(personId)}`);
  } catch (error) {
    main.append(el("h1", {}, "Person"), errorBox(error));
    return;
  }
  const { person: who, rows, truncated } = answer;
  append(main, [
    el("h1", { id: "person-name" }, who.display_name),
    keyValues([["id", el("span", { class: "mono" }, who.person_id)], ["aliases", who.aliases.join(", ")],
      ["rows by role", roles(who.roles)]], { id: "person-fields" }),
    truncated ? el("p", { class: "muted" }, "Only the newest rows of each role are listed.") : null,
    Object.entries(rows).flatMap(([role, listed]) => [
      el("h2", {}, `${role} (${listed.length})`),
      listed.length ? table(["date", "kind", "title", "thread", "row"], listed.map((r) => [
        day(r.date), r.kind, r.title || "—", threadLink(r.thread), rowLink(r.row_id)]), { id: `person-${role}` })
        : el("p", { class: "muted" }, "none")]),
  ]);
}

function roles(counts) {
  const shown = Object.entries(counts || {}).map(([role, n]) => `${role} ${n}`);
  return shown.length ? shown.join(" · ") : "—";
}
