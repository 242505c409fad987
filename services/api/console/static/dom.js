// Building elements without markup: every string becomes a text node (textContent), so document
// text such as `<img src=x onerror=...>` is shown, never parsed. No innerHTML anywhere.

const PROPERTIES = new Set(["value", "checked", "disabled", "hidden", "selected", "min", "max", "step",
  "type", "name", "placeholder", "required", "open", "title"]);

export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "on") {
      for (const [event, handler] of Object.entries(value)) node.addEventListener(event, handler);
    } else if (key === "class") {
      node.className = value;
    } else if (key === "href") {
      node.setAttribute("href", safeHref(value));
    } else if (PROPERTIES.has(key)) {
      node[key] = value;
    } else {
      node.setAttribute(key, String(value));
    }
  }
  append(node, children);
  return node;
}

export function append(node, children) {
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

// Links stay inside the console: only its own hash routes.
function safeHref(value) {
  return typeof value === "string" && value.startsWith("#/") ? value : "#/search";
}

export function clear(node) {
  node.replaceChildren();
  return node;
}

export function rowLink(rowId) {
  return el("a", { href: `#/row/${encodeURIComponent(rowId)}`, class: "mono" }, rowId);
}

export function threadLink(thread) {
  return thread ? el("a", { href: `#/thread/${encodeURIComponent(thread)}` }, thread) : el("span", { class: "muted" }, "no thread");
}

export function day(value) {
  return value ? String(value).slice(0, 10) : "undated";
}

export function when(value) {
  return value ? String(value).replace("T", " ").replace(/\.\d+/, "").replace("+00:00", "Z") : "";
}

export function errorBox(error) {
  return el("p", { class: "error", role: "alert" }, describe(error));
}

export function describe(error) {
  if (error && error.title) return `${error.status} ${error.title}: ${error.detail || ""}`.trim();
  return String(error && error.message ? error.message : error);
}

export function table(headings, rows, attrs = {}) {
  return el("table", attrs,
    el("thead", {}, el("tr", {}, headings.map((h) => el("th", {}, h)))),
    el("tbody", {}, rows.map((cells) => el("tr", {}, cells.map((c) => el("td", {}, c))))));
}

export function keyValues(pairs, attrs = {}) {
  return el("dl", { class: "kv", ...attrs }, pairs.flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, v)]));
}
