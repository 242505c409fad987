// The console's shell: log in with an API key, then route by the URL's hash to a page. Every
// page reads the HTTP API with the key; the hash holds only row and thread ids, never the key.

import { get, session } from "./api.js";
import * as audit from "./audit.js";
import { clear, describe, el } from "./dom.js";
import * as deadLetters from "./deadletters.js";
import * as people from "./people.js";
import * as row from "./row.js";
import * as runs from "./runs.js";
import * as search from "./search.js";
import * as stats from "./stats.js";
import * as thread from "./thread.js";

const main = document.getElementById("main");
const login = document.getElementById("login");
const nav = document.getElementById("nav");

const PAGES = {
  search: (id) => search.render(main, id),
  thread: (id) => thread.render(main, id),
  row: (id) => row.render(main, id),
  people: (id) => people.render(main, id),
  runs: (id) => runs.render(main, id),
  "dead-letters": () => deadLetters.render(main),
  stats: () => stats.render(main),
  audit: (kind) => audit.render(main, kind),
};

// Who the key is: /v1/stats answers an admin, refuses another role with 403 (the key is good),
// and refuses a bad key with 401; that answer is shown as the API gave it.
async function logIn(event) {
  event.preventDefault();
  const input = document.getElementById("api-key");
  const error = document.getElementById("login-error");
  const key = input.value.trim();
  error.textContent = "";
  let admin = true;
  try {
    await get("/v1/stats", { key });
  } catch (problem) {
    if (problem.status !== 403) {
      error.textContent = describe(problem);
      return;
    }
    admin = false;
  }
  input.value = "";
  session.save(key, admin);
  show();
}

function logOut() {
  session.clear();
  location.hash = "#/search";
  show();
}

function show() {
  runs.stop();
  stats.stop();
  const signedIn = Boolean(session.key());
  login.hidden = signedIn;
  nav.hidden = !signedIn;
  document.getElementById("logout").hidden = !signedIn;
  document.getElementById("who").textContent = signedIn ? (session.admin() ? "admin key" : "reader/writer key") : "";
  clear(main);
  if (!signedIn) {
    document.getElementById("api-key").focus();
    return;
  }
  for (const link of nav.querySelectorAll("a")) link.hidden = link.hasAttribute("data-admin") && !session.admin();
  const [, name = "search", ...rest] = location.hash.split("/");
  const page = PAGES[name] ? name : "search";
  for (const link of nav.querySelectorAll("a")) link.classList.toggle("current", link.dataset.page === page);
  let id = null;
  try {
    id = rest.length ? decodeURIComponent(rest.join("/")) : null;
  } catch {
    id = null;
  }
  if ((page === "thread" || page === "row") && !id) {
    main.append(el("p", { class: "error" }, `no ${page} id in the address`));
    return;
  }
  PAGES[page](id);
}

document.getElementById("login-form").addEventListener("submit", logIn);
document.getElementById("logout").addEventListener("click", logOut);
window.addEventListener("hashchange", show);
show();
