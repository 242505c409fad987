// A word-level diff of two versions of a document: the longest common subsequence of their
// tokens (words and the spaces between them), after trimming the common start and end.

const MAX_CELLS = 4_000_000; // past this the middle is shown as one deletion and one insertion

export function tokens(text) {
  return String(text || "").match(/\s+|[^\s]+/g) || [];
}

export function wordDiff(before, after) {
  const a = tokens(before), b = tokens(after);
  let start = 0;
  while (start < a.length && start < b.length && a[start] === b[start]) start++;
  let endA = a.length, endB = b.length;
  while (endA > start && endB > start && a[endA - 1] === b[endB - 1]) { endA--; endB--; }
  const parts = [];
  push(parts, "same", a.slice(0, start));
  const midA = a.slice(start, endA), midB = b.slice(start, endB);
  if (midA.length * midB.length > MAX_CELLS) {
    push(parts, "del", midA);
    push(parts, "add", midB);
  } else {
    for (const [op, token] of lcs(midA, midB)) push(parts, op, [token]);
  }
  push(parts, "same", a.slice(endA));
  return parts;
}

function lcs(a, b) {
  const n = a.length, m = b.length, width = m + 1;
  const table = new Uint32Array((n + 1) * width);
  for (let i = n - 1; i >= 0; i--) {
    for (let j = m - 1; j >= 0; j--) {
      table[i * width + j] = a[i] === b[j] ? table[(i + 1) * width + j + 1] + 1
        : Math.max(table[(i + 1) * width + j], table[i * width + j + 1]);
    }
  }
  const out = [];
  let i = 0, j = 0;
  while (i < n && j < m) {
    if (a[i] === b[j]) { out.push(["same", a[i]]); i++; j++; }
    else if (table[(i + 1) * width + j] >= table[i * width + j + 1]) out.push(["del", a[i++]]);
    else out.push(["add", b[j++]]);
  }
  while (i < n) out.push(["del", a[i++]]);
  while (j < m) out.push(["add", b[j++]]);
  return out;
}

// Neighbouring tokens of one kind are joined, so the page shows phrases rather than single words.
function push(parts, op, list) {
  if (!list.length) return;
  const text = list.join("");
  const last = parts[parts.length - 1];
  if (last && last.op === op) last.text += text;
  else parts.push({ op, text });
}

export function wordCounts(parts) {
  const count = (op) => parts.filter((p) => p.op === op).reduce((n, p) => n + (p.text.match(/[^\s]+/g) || []).length, 0);
  return { added: count("add"), removed: count("del") };
}
