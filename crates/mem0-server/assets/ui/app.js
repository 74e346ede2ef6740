// The mem0-rs dashboard: plain JavaScript, no build step, no third-party code. Every call goes to
// this server's API with the key in the X-API-Key header (kept in sessionStorage, never a cookie),
// so the server applies the same rights as to any client; the page only hides what the caller's
// role may not do. Texts from the server are always inserted as text, never as HTML.
"use strict";

const KEY = "mem0.apiKey";
const main = document.getElementById("main");
const session = { auth: true, me: null };

function h(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else if (name === "value") node.value = value;
    else if (name === "checked") node.checked = Boolean(value);
    else node.setAttribute(name, value === true ? "" : value);
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

const enc = encodeURIComponent;
const when = (time) => (time ? new Date(time).toLocaleString() : "");

function toast(message) {
  const box = document.getElementById("toast");
  box.textContent = message;
  box.classList.add("shown");
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => box.classList.remove("shown"), 2500);
}

async function api(method, path, body) {
  const headers = { accept: "application/json" };
  const key = sessionStorage.getItem(KEY);
  if (key) headers["x-api-key"] = key;
  if (body !== undefined) headers["content-type"] = "application/json";
  const response = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await response.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch { data = null; }
  if (!response.ok) {
    const error = new Error((data && data.message) || `${response.status} ${response.statusText}`);
    error.status = response.status;
    throw error;
  }
  return data;
}

const canWrite = () => session.me && session.me.role !== "read";
const tenantAdmin = () => session.me && (session.me.tenant_admin || session.me.global_admin);

function scopeOf(params) {
  const scope = {};
  for (const name of ["user_id", "agent_id", "run_id"]) if (params.get(name)) scope[name] = params.get(name);
  return scope;
}
const scopeQuery = (scope) => Object.entries(scope).map(([k, v]) => `${k}=${enc(v)}`).join("&");
const scopeLabel = (scope) => Object.entries(scope).map(([k, v]) => `${k.replace("_id", "")} ${v}`).join(", ");

function field(label, input) {
  if (!input.id) input.id = `f-${label.toLowerCase().replace(/[^a-z0-9]+/g, "-")}`;
  return h("div", {}, h("label", { for: input.id }, label), input);
}

function navigation(current) {
  const links = [];
  if (tenantAdmin()) links.push(["#/scopes", "Scopes"]);
  links.push(["#/memories", "Memories"], ["#/search", "Search"]);
  if (tenantAdmin()) links.push(["#/admin", "Admin"]);
  const nav = document.getElementById("nav");
  nav.replaceChildren(...links.map(([href, text]) =>
    h("a", { href, "aria-current": current === href ? "page" : null }, text)));
  const who = document.getElementById("who");
  who.replaceChildren();
  if (session.me) {
    who.append(`${session.me.tenant} · ${session.me.role}${session.me.global_admin ? " (global)" : ""} `);
    if (session.auth) who.append(h("a", { href: "#/signout" }, "Sign out"));
  }
}

function show(...nodes) {
  main.replaceChildren(...nodes.filter(Boolean));
  const heading = main.querySelector("h1");
  if (heading) document.title = `${heading.textContent} · mem0-rs`;
}

function failure(error) {
  if (error.status === 401) { sessionStorage.removeItem(KEY); session.me = null; location.hash = "#/signin"; return; }
  show(h("h1", {}, "Something went wrong"), h("p", { class: "error", role: "alert" }, error.message));
}

async function signIn() {
  navigation("");
  const key = h("input", { type: "password", autocomplete: "off", required: true, id: "api-key" });
  const message = h("p", { class: "error", role: "alert" });
  show(h("h1", {}, "Sign in"),
    h("form", { class: "card", onsubmit: async (event) => {
      event.preventDefault();
      sessionStorage.setItem(KEY, key.value.trim());
      try { session.me = await api("GET", "/me"); location.hash = "#/"; }
      catch (error) { sessionStorage.removeItem(KEY); message.textContent = error.status === 401 ? "That key was not accepted." : error.message; }
    } },
    h("p", { class: "muted" }, "The key stays in this browser tab only (session storage) and travels in the X-API-Key header."),
    field("API key", key), message, h("button", { type: "submit" }, "Sign in")));
  key.focus();
}

async function scopesPage(params) {
  const type = params.get("type") || "";
  const cursor = params.get("cursor");
  const data = await api("GET", `/entities?limit=50${type ? `&type=${type}` : ""}${cursor ? `&cursor=${enc(cursor)}` : ""}`);
  const kind = h("select", { id: "scope-type", onchange: () => { location.hash = `#/scopes${kind.value ? `?type=${kind.value}` : ""}`; } },
    ["", "user", "agent", "run"].map((value) => h("option", { value, selected: value === type }, value || "users, agents and runs")));
  const filter = h("input", { type: "search", id: "scope-filter", placeholder: "Filter this page by id" });
  const rows = data.results.map((scope) => h("tr", { "data-id": scope.id },
    h("td", {}, scope.type),
    h("td", {}, h("a", { href: `#/memories?${scope.type}_id=${enc(scope.id)}` }, scope.id)),
    h("td", {}, String(scope.total_memories)),
    h("td", { class: "optional" }, when(scope.updated_at))));
  filter.addEventListener("input", () => {
    const needle = filter.value.toLowerCase();
    for (const row of rows) row.hidden = !row.dataset.id.toLowerCase().includes(needle);
  });
  show(h("h1", {}, "Scopes"),
    h("section", {}, h("div", { class: "row" }, field("Kind", kind), field("Filter", filter)),
      h("table", {}, h("thead", {}, h("tr", {}, h("th", {}, "Kind"), h("th", {}, "Id"), h("th", {}, "Memories"), h("th", { class: "optional" }, "Last change"))),
        h("tbody", {}, rows)),
      data.results.length === 0 ? h("p", { class: "muted" }, "No memories yet.") : null,
      data.next ? h("p", {}, h("a", { href: `#/scopes?${type ? `type=${type}&` : ""}cursor=${enc(data.next)}` }, "Next page →")) : null));
}

function openScopeForm() {
  const bound = session.me.user_ids || [];
  const user = h("input", { id: "open-user", required: true, value: bound[0] || "" });
  return h("form", { class: "card", onsubmit: (event) => { event.preventDefault(); location.hash = `#/memories?user_id=${enc(user.value.trim())}`; } },
    h("div", { class: "row" }, field("User id", user), h("div", { class: "narrow" }, h("button", { type: "submit" }, "Open"))));
}

async function memoriesPage(params) {
  const scope = scopeOf(params);
  if (Object.keys(scope).length === 0) {
    const bound = session.me.user_ids || [];
    if (bound.length === 1) { location.hash = `#/memories?user_id=${enc(bound[0])}`; return; }
    show(h("h1", {}, "Memories"), openScopeForm());
    return;
  }
  const cursor = params.get("cursor");
  const expired = params.get("show_expired") === "true";
  const filters = params.get("filters") || "";
  const listing = (extra) => `#/memories?${scopeQuery(scope)}${expired ? "&show_expired=true" : ""}${filters ? `&filters=${enc(filters)}` : ""}${extra || ""}`;
  const list = await api("GET", `/memories?${scopeQuery(scope)}&page_size=25${expired ? "&show_expired=true" : ""}${filters ? `&filters=${enc(filters)}` : ""}${cursor ? `&cursor=${enc(cursor)}` : ""}`);
  const parts = [h("h1", {}, `Memories of ${scopeLabel(scope)}`)];
  if (canWrite()) {
    const text = h("textarea", { id: "new-memory", required: true, placeholder: "A message to remember, e.g. I am allergic to peanuts" });
    const infer = h("input", { type: "checkbox", id: "new-infer" });
    parts.push(h("form", { class: "card", "aria-label": "Add a memory", onsubmit: async (event) => {
      event.preventDefault();
      try {
        const added = await api("POST", "/memories", { ...scope, infer: infer.checked, messages: [{ role: "user", content: text.value }] });
        toast(`Added ${added.results.length} ${added.results.length === 1 ? "memory" : "memories"}`);
        route();
      } catch (error) { toast(error.message); }
    } },
    field("New memory", text),
    h("div", { class: "row" }, h("label", { class: "check", for: "new-infer" }, infer, "Extract facts with the LLM (infer)"),
      h("div", { class: "narrow" }, h("button", { type: "submit" }, "Add")))));
  }
  const filter = h("input", { type: "search", id: "memory-filter", placeholder: "Words in the text" });
  const showExpired = h("input", { type: "checkbox", id: "show-expired", checked: expired, onchange: () => {
    location.hash = `#/memories?${scopeQuery(scope)}${showExpired.checked ? "&show_expired=true" : ""}${filters ? `&filters=${enc(filters)}` : ""}`;
  } });
  const conditions = h("input", { id: "memory-conditions", value: filters, placeholder: '{"category": "food"}' });
  const conditionsForm = h("form", { class: "row", onsubmit: (event) => {
    event.preventDefault();
    const value = conditions.value.trim();
    if (value) { try { JSON.parse(value); } catch { toast("Filters are not valid JSON"); return; } }
    location.hash = `#/memories?${scopeQuery(scope)}${expired ? "&show_expired=true" : ""}${value ? `&filters=${enc(value)}` : ""}`;
  } }, field("Metadata filters (JSON, as the API takes them)", conditions), h("div", { class: "narrow" }, h("button", { type: "submit", class: "secondary" }, "Apply")));
  const rows = list.results.map((memory) => h("tr", { "data-text": memory.memory.toLowerCase() },
    h("td", {}, h("a", { href: `#/memory/${memory.id}` }, memory.memory)),
    h("td", { class: "optional muted" }, when(memory.created_at)),
    h("td", {}, canWrite() ? h("button", { class: "danger", type: "button", "aria-label": `Delete: ${memory.memory}`, onclick: async () => {
      if (!confirm(`Delete this memory?\n\n${memory.memory}`)) return;
      try { await api("DELETE", `/memories/${memory.id}`); toast("Deleted"); route(); } catch (error) { toast(error.message); }
    } }, "Delete") : null)));
  filter.addEventListener("input", () => {
    for (const row of rows) row.hidden = !row.dataset.text.includes(filter.value.toLowerCase());
  });
  parts.push(h("section", {}, conditionsForm,
    h("div", { class: "row" }, field("Filter this page", filter), h("label", { class: "check", for: "show-expired" }, showExpired, "Show expired")),
    h("table", { id: "memories" }, h("thead", {}, h("tr", {}, h("th", {}, "Memory"), h("th", { class: "optional" }, "Created"), h("th", {}, ""))), h("tbody", {}, rows)),
    list.results.length === 0 ? h("p", { class: "muted" }, "No memories in this scope.") : null,
    list.next ? h("p", {}, h("a", { href: listing(`&cursor=${enc(list.next)}`) }, "Next page →")) : null));
  show(...parts);
}

async function memoryPage(id) {
  const [memory, history] = await Promise.all([api("GET", `/memories/${enc(id)}`), api("GET", `/memories/${enc(id)}/history`)]);
  const scope = {};
  for (const name of ["user_id", "agent_id", "run_id"]) if (memory[name]) scope[name] = memory[name];
  const facts = [
    ["Scope", scopeLabel(scope)], ["Created", when(memory.created_at)], ["Updated", when(memory.updated_at)],
    ["Expires", memory.expiration_date || "never"], ["Status", memory.status || "current"],
    ["Source", [memory.source_type, memory.source_actor, memory.source_app && `via ${memory.source_app}`].filter(Boolean).join(", ")],
    ["Said by", [memory.role, memory.attributed_to && `about ${memory.attributed_to}`].filter(Boolean).join(", ")],
    ["Confidence", memory.confidence === undefined || memory.confidence === null ? "" : String(memory.confidence)],
    ["Evidence", memory.evidence_ref || ""],
    ["State key", memory.state_key || ""],
  ].filter(([, value]) => value !== "");
  const parts = [h("h1", {}, "Memory"),
    h("section", {}, h("p", { id: "memory-text" }, memory.memory),
      h("table", {}, h("tbody", {}, facts.map(([name, value]) => h("tr", {}, h("th", {}, name), h("td", {}, value))))),
      h("h2", {}, "Metadata"), h("pre", {}, JSON.stringify(memory.metadata || {}, null, 2)))];
  if (canWrite()) {
    const text = h("textarea", { id: "edit-text", value: memory.memory });
    const metadata = h("textarea", { id: "edit-metadata", value: JSON.stringify(memory.metadata || {}, null, 2) });
    const expiration = h("input", { type: "date", id: "edit-expiration", value: (memory.expiration_date || "").slice(0, 10) });
    parts.push(h("form", { class: "card", "aria-label": "Edit", onsubmit: async (event) => {
      event.preventDefault();
      let meta;
      try { meta = JSON.parse(metadata.value || "{}"); } catch { toast("Metadata is not valid JSON"); return; }
      const change = { text: text.value, metadata: meta };
      if (expiration.value) change.expiration_date = expiration.value;
      else if (memory.expiration_date) change.expiration_date = null;
      try { await api("PUT", `/memories/${enc(id)}`, change); toast("Saved"); route(); } catch (error) { toast(error.message); }
    } },
    h("h2", {}, "Edit"), field("Text", text), field("Metadata (JSON)", metadata), field("Expires on", expiration),
    h("div", { class: "actions" }, h("button", { type: "submit" }, "Save"),
      h("button", { type: "button", class: "danger", onclick: async () => {
        if (!confirm(`Delete this memory?\n\n${memory.memory}`)) return;
        try { await api("DELETE", `/memories/${enc(id)}`); toast("Deleted"); location.hash = `#/memories?${scopeQuery(scope)}`; }
        catch (error) { toast(error.message); }
      } }, "Delete"))));
  }
  parts.push(h("section", {}, h("h2", {}, "History"), h("ol", { class: "timeline", id: "history" },
    history.map((entry) => h("li", {},
      h("div", {}, h("strong", {}, entry.event), " ", h("span", { class: "muted" }, when(entry.created_at))),
      entry.old_memory ? h("div", { class: "old" }, entry.old_memory) : null,
      entry.new_memory ? h("div", {}, entry.new_memory) : null)))));
  show(...parts);
}

function bars(result) {
  const parts = (result.explain && result.explain.contributions) || {};
  const total = Math.max(result.score || 0, 1e-9);
  return h("div", { class: "bars", "aria-label": "Score parts" }, ["semantic", "keyword", "entity"].map((name) => {
    const value = parts[name] || 0;
    return [h("span", {}, name), h("div", { class: `bar ${name}`, role: "img", "aria-label": `${name} ${value.toFixed(3)}` },
      h("span", { style: null, "data-width": Math.round((100 * value) / total) })), h("span", { class: "score" }, value.toFixed(3))];
  }));
}

async function searchPage(params) {
  const query = h("input", { id: "search-query", required: true, value: params.get("q") || "" });
  const user = h("input", { id: "search-user", required: true, value: params.get("user_id") || (session.me.user_ids || [])[0] || "" });
  const mode = h("select", { id: "search-mode" }, ["hybrid", "dense", "keyword"].map((value) => h("option", { value }, value)));
  const topK = h("input", { id: "search-top-k", type: "number", min: 1, max: 100, value: 10 });
  const threshold = h("input", { id: "search-threshold", type: "number", min: 0, max: 1, step: "0.01", placeholder: "none" });
  const conditions = h("input", { id: "search-filters", placeholder: '{"category": "food"}' });
  const results = h("section", { id: "results", "aria-live": "polite" }, h("p", { class: "muted" }, "Results show their score split into its signals."));
  show(h("h1", {}, "Search"),
    h("form", { class: "card", onsubmit: async (event) => {
      event.preventDefault();
      const body = { query: query.value, user_id: user.value.trim(), mode: mode.value, top_k: Number(topK.value) || 10, explain: true };
      if (threshold.value !== "") body.threshold = Number(threshold.value);
      if (conditions.value.trim()) {
        try { body.filters = { ...JSON.parse(conditions.value), user_id: body.user_id }; }
        catch { results.replaceChildren(h("p", { class: "error", role: "alert" }, "Filters are not valid JSON")); return; }
      }
      try {
        const found = await api("POST", "/search", body);
        const shown = found.results.map((result) => h("div", { class: "result" },
          h("a", { href: `#/memory/${result.id}` }, result.memory), " ", h("span", { class: "score" }, `score ${result.score.toFixed(3)}`),
          bars(result)));
        results.replaceChildren(...(shown.length ? shown : [h("p", { class: "muted" }, "Nothing found.")]));
        for (const bar of results.querySelectorAll("[data-width]")) bar.style.width = `${Math.min(100, Number(bar.dataset.width))}%`;
      } catch (error) { results.replaceChildren(h("p", { class: "error", role: "alert" }, error.message)); }
    } },
    h("div", { class: "row" }, field("Query", query), field("User id", user)),
    field("Metadata filters (JSON, as the API takes them)", conditions),
    h("div", { class: "row" }, field("Mode", mode), field("Top k", topK), field("Threshold", threshold),
      h("div", { class: "narrow" }, h("button", { type: "submit" }, "Search")))),
    results);
}

async function adminPage() {
  const [keys, requests, usage] = await Promise.all([api("GET", "/api-keys"), api("GET", "/requests?limit=50"), api("GET", "/usage")]);
  const label = h("input", { id: "key-label", required: true });
  const role = h("select", { id: "key-role" }, ["read", "write", "admin"].map((value) => h("option", { value }, value)));
  const users = h("input", { id: "key-users", placeholder: "any user" });
  const created = h("div", { "aria-live": "polite" });
  const parts = [h("h1", {}, "Admin"),
    h("section", {}, h("h2", {}, "API keys"),
      h("form", { onsubmit: async (event) => {
        event.preventDefault();
        const body = { label: label.value, role: role.value };
        const bound = users.value.split(",").map((id) => id.trim()).filter(Boolean);
        if (bound.length) body.user_ids = bound;
        try {
          const key = await api("POST", "/api-keys", body);
          created.replaceChildren(h("p", {}, "The new key, shown this once:"), h("p", { class: "secret", id: "new-key" }, key.key),
            h("button", { type: "button", class: "secondary", onclick: () => route() }, "Done"));
        } catch (error) { toast(error.message); }
      } },
      h("div", { class: "row" }, field("Label", label), field("Role", role), field("Bound to users (comma-separated)", users),
        h("div", { class: "narrow" }, h("button", { type: "submit" }, "Create")))),
      created,
      h("table", { id: "keys" }, h("thead", {}, h("tr", {}, h("th", {}, "Label"), h("th", {}, "Role"), h("th", { class: "optional" }, "Prefix"),
        h("th", { class: "optional" }, "Last used"), h("th", {}, ""))),
        h("tbody", {}, keys.results.map((key) => h("tr", {},
          h("td", {}, key.label), h("td", {}, key.role + (key.user_ids ? ` (${key.user_ids.join(", ")})` : "")),
          h("td", { class: "optional" }, key.key_prefix), h("td", { class: "optional" }, when(key.last_used_at)),
          h("td", {}, key.revoked_at ? h("span", { class: "muted" }, "revoked") : h("button", { class: "danger", type: "button", onclick: async () => {
            if (!confirm(`Revoke the key “${key.label}”? Clients using it stop working.`)) return;
            try { await api("DELETE", `/api-keys/${key.id}`); toast("Revoked"); route(); } catch (error) { toast(error.message); }
          } }, "Revoke"))))))),
    h("section", {}, h("h2", {}, `LLM usage, ${usage.from} to ${usage.to}`),
      h("p", { id: "usage-totals" }, `${usage.totals.calls} calls, ${usage.totals.prompt_tokens} prompt and ${usage.totals.completion_tokens} completion tokens`),
      usage.results.length ? h("table", { id: "usage" }, h("thead", {}, h("tr", {}, h("th", {}, "Day"), h("th", {}, "Model"), h("th", {}, "Purpose"),
        h("th", {}, "Calls"), h("th", { class: "optional" }, "Tokens in / out"))),
        h("tbody", {}, usage.results.map((row) => h("tr", {}, h("td", {}, row.day), h("td", {}, `${row.provider} ${row.model}`), h("td", {}, row.purpose),
          h("td", {}, String(row.calls)), h("td", { class: "optional" }, `${row.prompt_tokens} / ${row.completion_tokens}`))))) : null),
    h("section", {}, h("h2", {}, "Request log"),
      h("table", { id: "requests" }, h("thead", {}, h("tr", {}, h("th", {}, "Time"), h("th", {}, "Request"), h("th", {}, "Status"), h("th", { class: "optional" }, "ms"))),
        h("tbody", {}, requests.results.map((entry) => h("tr", {},
          h("td", { class: "muted" }, when(entry.at)), h("td", {}, `${entry.method} ${entry.route}`),
          h("td", {}, String(entry.status)), h("td", { class: "optional" }, String(entry.latency_ms))))))),
  ];
  if (session.me.global_admin) {
    const config = await api("GET", "/configure");
    parts.push(h("section", {}, h("h2", {}, "Runtime configuration (secrets hidden)"), h("pre", { id: "config" }, JSON.stringify(config, null, 2))));
  }
  show(...parts);
}

async function route() {
  const [path, query] = (location.hash.slice(1) || "/").split("?");
  const params = new URLSearchParams(query || "");
  if (path === "/signout") { sessionStorage.removeItem(KEY); session.me = null; location.hash = "#/signin"; return; }
  if (!session.me && session.auth && !sessionStorage.getItem(KEY)) { if (path !== "/signin") location.hash = "#/signin"; else signIn(); return; }
  if (path === "/signin") { if (session.me) { location.hash = "#/"; } else signIn(); return; }
  try {
    if (!session.me) session.me = await api("GET", "/me");
    const section = `#/${path.split("/")[1] || ""}`;
    navigation(section);
    if (path === "/" ) { location.hash = tenantAdmin() ? "#/scopes" : "#/memories"; return; }
    if (path === "/scopes") await scopesPage(params);
    else if (path === "/memories") await memoriesPage(params);
    else if (path.startsWith("/memory/")) await memoryPage(decodeURIComponent(path.slice("/memory/".length)));
    else if (path === "/search") await searchPage(params);
    else if (path === "/admin") await adminPage();
    else show(h("h1", {}, "Not found"), h("p", {}, h("a", { href: "#/" }, "Back")));
    main.focus({ preventScroll: true });
  } catch (error) { failure(error); }
}

async function start() {
  try {
    const settings = await api("GET", "/ui/settings.json");
    session.auth = settings.auth;
  } catch (error) { failure(error); return; }
  window.addEventListener("hashchange", route);
  route();
}

start();
