// The one way to the data: the orgmem HTTP API with the session's key as a bearer credential.
// The key lives in sessionStorage only (gone when the tab closes) and never in a URL.

const KEY = "orgmem.console.key";
const ROLE = "orgmem.console.admin";

export const session = {
  key: () => sessionStorage.getItem(KEY),
  admin: () => sessionStorage.getItem(ROLE) === "yes",
  save(key, admin) {
    sessionStorage.setItem(KEY, key);
    sessionStorage.setItem(ROLE, admin ? "yes" : "no");
  },
  clear() {
    sessionStorage.removeItem(KEY);
    sessionStorage.removeItem(ROLE);
  },
};

export class ApiError extends Error {
  constructor(status, problem) {
    super(problem.detail || problem.title || `HTTP ${status}`);
    this.status = status;
    this.title = problem.title || `HTTP ${status}`;
    this.detail = problem.detail || "";
    this.problem = problem;
  }
}

// `ok` lists statuses besides 2xx whose body is an answer, not an error (/readyz says 503 when lagging).
export async function call(method, path, { body, key = session.key(), ok = [] } = {}) {
  const headers = { Accept: "application/json" };
  if (key) headers.Authorization = `Bearer ${key}`;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  let response;
  try {
    response = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body),
      credentials: "omit", cache: "no-store", redirect: "error" });
  } catch (error) {
    throw new ApiError(0, { title: "Network error", detail: String(error.message || error) });
  }
  let data = null;
  try {
    data = await response.json();
  } catch {
    data = { title: response.statusText, detail: "" };
  }
  if (!response.ok && !ok.includes(response.status)) throw new ApiError(response.status, data || {});
  return data;
}

export const get = (path, options) => call("GET", path, options);
export const post = (path, body, options) => call("POST", path, { ...options, body });
export const segment = (value) => encodeURIComponent(value);
