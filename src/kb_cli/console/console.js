// The Agent Knowledge console: sources, agents and workspaces, "try it" (search/read and the agent tool
// with its events as a timeline), tokens. Plain browser JavaScript, no library, no network beyond the
// kb serve that serves it (admin API and Invoke API on loopback, the public API with a console token).

const STRINGS = {
  en: {
    brand: "Agent Knowledge Console", sections: "Sections", "nav.sources": "Sources",
    "nav.agents": "Agents & workspaces", "nav.try": "Try it", "nav.tokens": "Tokens", other: "中文",
    cancel: "Cancel", confirm: "Confirm", loading: "Loading…", none: "Nothing here yet.",
    "sources.title": "Knowledge sources", key: "Key", description: "Description", status: "Status",
    enabled: "Enabled", lease: "Lease until", searchable: "Searchable", actions: "Actions",
    documents: "Documents", enable: "Enable", disable: "Disable", delete: "Delete", yes: "yes", no: "no",
    "docs.title": "Documents of {source}", docId: "Doc id", title: "Title", revision: "Revision",
    size: "Size (chars)", updated: "Updated", truncatedList: "Only the first {n} documents are listed.",
    "upload.title": "Ingest files", source: "Source", file: "Files (.md, .txt, .html, .pdf, .docx; several at once)", tenant: "Tenant",
    "index.title": "Search index", index: "Index", shards: "Shards", segments: "Segments", target: "Target",
    indexSize: "Size", fragmented: "Fragmented", merging: "Merging", compact: "Compact now",
    compactStarted: "Compaction started in the background", compactNothing: "Nothing to compact: every index is at its target",
    upload: "Upload", uploaded: "Ingested {doc} into {source}", uploadFailed: "{doc} was not ingested: {code}", uploadPending: "{doc}: the ingestion job is still running ({job})",
    uploadedMany: "Ingested {done} of {total} files into {source}", notIngested: "not ingested: {list}", stillRunning: "still running: {list}",
    docIdOrPrefix: "its name's id when empty; with several files, their prefix", sameId: "{a} and {b} would be one document: upload them apart, each with its own doc id", "confirm.delete": "Delete {doc} from {source}?",
    "agents.title": "Agents", "workspaces.title": "Workspaces", route: "Route", agent: "Agent",
    pointTo: "Point to", point: "Point", "confirm.point": "Point route {route} from {from} to {to}?",
    pointed: "Route {route} now points to {to}", routes: "Routes", mode: "Mode", legacy: "legacy",
    budgets: "Budgets", allowed: "Allowed knowledge", rules: "Rules", models: "Model compatibility",
    precheck: "Publish precheck", precheckOk: "passed: every model candidate can call tools",
    precheckNotNeeded: "passed: this mode does not call tools", compatible: "compatible",
    incompatible: "needs toolCalling: true", terms: "Query terms", tags: "Tags", context: "Context equals",
    always: "Always", priority: "Priority", maxRetrievals: "max retrievals", maxPerSource: "per source",
    maxChars: "max context chars", sourceMax: "source max chars", topK: "top K", maxSources: "max sources",
    failure: "failure policy", rerank: "rerank",
    "try.title": "Try it", "try.search": "Search and read as a route", query: "Query", limit: "Limit",
    search: "Search", hints: "Hints", read: "Read", next: "Next page", endOfDoc: "End of the document.",
    maxBytes: "Max bytes", bytes: "{n} bytes of {max}", pageOf: "Page {n}", total: "Document: {n} bytes",
    chainEnd: "The read chain limit was reached: search again for the rest.",
    searchStatus: "Status {status}, hints: {n}, response {bytes} of {max} bytes",
    "why.title": "Why no hints", "why.noAgent": "Route {route} points at no agent.",
    "why.noSource": "No source selected: agent {agent} routes {mode} and nothing in this search selects a source.",
    "why.rule": "The rule for {source} needs {needs}; a search carries no trusted context.",
    "why.unsearchable": "{source} is not searchable now (unpublished, disabled or inactive).",
    "why.noMatch": "Sources without a rule are chosen when a query word is in their description or tags.",
    "why.noDocs": "{source} was searched but holds no ready document of tenant {tenant} (its documents' tenants: {tenants}).",
    "why.minScore": "{source} was searched ({n} documents of tenant {tenant}) but nothing matched: none scored above its minScore {min}, or, sharing no word with the query, none was close enough in meaning.",
    "try.tool": "Run knowledge_search as an agent", operation: "Operation", sourcesArg: "Sources (exact keys, optional)",
    trusted: "Trusted context (JSON)", ancestors: "Ancestors (one per line: invocation_id agent@version)",
    run: "Run", timeline: "Events", references: "References", ledger: "Budgets per chain level",
    planned: "Planned", retrieved: "Retrieved", fused: "Fused", cited: "Citation created",
    reason: "reason", notPlanned: "Not selected", count: "count", ms: "ms",
    used: "{used} used, {left} left", retrievals: "Retrievals", chars: "Chars", invocation: "Invocation",
    operatorMissing: "This console needs the operator credential of kb serve: open it through the console URL kb serve prints at start (…/console/#operator=…), in this tab.",
    errorCode: "Error {code}", hint: "What to check", badJson: "Trusted context must be a JSON object.",
    badAncestors: "Each ancestor line needs an invocation id and an exact agent key.",
    "tokens.title": "Tokens", issue: "Issue", routesCsv: "Routes (comma-separated)", subject: "Subject",
    client: "Client", ttl: "TTL (seconds)", issued: "Issued {id}. Copy the token now: it is not shown again.",
    tokenId: "Token id", expires: "Expires", revoked: "Revoked", revoke: "Revoke",
    "confirm.revoke": "Revoke token {id}? Requests with it are refused from then on.",
    revokedMsg: "Token {id} revoked", noTokenApi: "This server has no token listing.",
    failed: "Failed: {code}",
    metadata: "Metadata", sourceFilters: "Source filters", filter: "Filter (values in {…} come from the trusted context)",
    "ranking.hybrid": "Ranking: hybrid (BM25 + vectors)", "ranking.none": "Ranking: BM25 (no embedding model)",
    "ranking.filling": "Ranking: BM25 while the vectors are filled in (hybrid once they are in)",
  },
  zh: {
    "ranking.hybrid": "排序：混合（BM25 + 向量）", "ranking.none": "排序：BM25（无嵌入模型）",
    "ranking.filling": "排序：向量填充中，暂按 BM25（填充完成后为混合排序）",
    brand: "智能体知识控制台", sections: "栏目", "nav.sources": "知识库", "nav.agents": "智能体与工作区",
    "nav.try": "试用", "nav.tokens": "令牌", other: "English", cancel: "取消", confirm: "确认",
    loading: "加载中…", none: "暂无内容。", "sources.title": "知识库", key: "键", description: "描述",
    status: "状态", enabled: "启用", lease: "租约到期", searchable: "可检索", actions: "操作",
    documents: "文档", enable: "启用", disable: "停用", delete: "删除", yes: "是", no: "否",
    "docs.title": "{source} 的文档", docId: "文档 ID", title: "标题", revision: "修订",
    size: "大小（字符）", updated: "更新时间", truncatedList: "仅列出前 {n} 篇文档。",
    "upload.title": "上传文件入库", source: "知识库", file: "文件（.md、.txt、.html、.pdf、.docx；可多选）", tenant: "租户",
    "index.title": "检索索引", index: "索引", shards: "分片", segments: "段", target: "目标段数",
    indexSize: "大小", fragmented: "碎片化", merging: "合并中", compact: "立即合并",
    compactStarted: "已在后台开始合并", compactNothing: "无需合并：每个索引都已达到目标段数",
    upload: "上传", uploaded: "已将 {doc} 写入 {source}", uploadFailed: "{doc} 未能入库：{code}", uploadPending: "{doc}：入库任务仍在运行（{job}）",
    uploadedMany: "{total} 个文件中 {done} 个已写入 {source}", notIngested: "未能入库：{list}", stillRunning: "仍在运行：{list}",
    docIdOrPrefix: "留空则按文件名生成；多个文件时作为前缀", sameId: "{a} 与 {b} 会成为同一篇文档：请分别上传，各自指定文档 ID", "confirm.delete": "从 {source} 删除 {doc}？",
    "agents.title": "智能体", "workspaces.title": "工作区", route: "路由", agent: "智能体",
    pointTo: "指向", point: "切换", "confirm.point": "将路由 {route} 从 {from} 切换到 {to}？",
    pointed: "路由 {route} 已指向 {to}", routes: "路由", mode: "方式", legacy: "旧版",
    budgets: "预算", allowed: "授权知识库", rules: "规则", models: "模型兼容性", precheck: "发布预检",
    precheckOk: "通过：所有候选模型均支持工具调用", precheckNotNeeded: "通过：此方式不调用工具",
    compatible: "兼容", incompatible: "需要 toolCalling: true", terms: "查询词", tags: "标签",
    context: "上下文等于", always: "总是", priority: "优先级", maxRetrievals: "最大检索次数",
    maxPerSource: "单库上限", maxChars: "正文额度", sourceMax: "单库正文", topK: "Top K",
    maxSources: "最多知识库", failure: "失败策略", rerank: "重排",
    "try.title": "试用", "try.search": "以路由身份检索与阅读", query: "查询", limit: "数量", search: "检索",
    hints: "提示", read: "阅读", next: "下一页", endOfDoc: "文档已读完。", maxBytes: "最大字节",
    bytes: "{n} / {max} 字节", pageOf: "第 {n} 页", total: "文档共 {n} 字节",
    chainEnd: "已达到阅读链上限：请重新检索以阅读其余部分。",
    searchStatus: "状态 {status}，{n} 条提示，响应 {bytes} / {max} 字节",
    "why.title": "为什么没有提示", "why.noAgent": "路由 {route} 未指向任何智能体。",
    "why.noSource": "未选中任何知识库：智能体 {agent} 的路由模式为 {mode}，本次搜索没有选中任何知识库。",
    "why.rule": "{source} 的规则需要 {needs}；搜索不携带可信上下文。",
    "why.unsearchable": "{source} 当前不可搜索（未发布、已停用或已吊销）。",
    "why.noMatch": "没有规则的知识库在查询词出现在其描述或标签中时才会被选中。",
    "why.noDocs": "已搜索 {source}，但其中没有租户 {tenant} 的就绪文档（文档所属租户：{tenants}）。",
    "why.minScore": "已搜索 {source}（租户 {tenant} 的文档 {n} 篇），但没有匹配：没有结果高于其 minScore {min}，或与查询没有共同词语且语义不够接近。",
    "try.tool": "以智能体身份运行 knowledge_search", operation: "操作", sourcesArg: "知识库（精确键，可选）",
    trusted: "可信上下文（JSON）", ancestors: "祖先调用（每行：调用 ID 智能体@版本）", run: "运行",
    timeline: "事件", references: "引用", ledger: "调用链各层预算", planned: "已选源", retrieved: "检索结果",
    fused: "融合", cited: "新引用", reason: "原因", notPlanned: "未选择", count: "数量", ms: "毫秒",
    used: "已用 {used}，剩余 {left}", retrievals: "检索次数", chars: "正文字符", invocation: "调用",
    operatorMissing: "控制台需要 kb serve 的操作员凭据：请在此标签页中打开 kb serve 启动时打印的控制台地址（…/console/#operator=…）。",
    errorCode: "错误 {code}", hint: "排查方法", badJson: "可信上下文必须是 JSON 对象。",
    badAncestors: "每行祖先调用需要调用 ID 和精确的智能体键。", "tokens.title": "令牌", issue: "签发",
    routesCsv: "路由（逗号分隔）", subject: "主体", client: "客户端", ttl: "有效期（秒）",
    issued: "已签发 {id}。请立即复制令牌：之后不再显示。", tokenId: "令牌 ID", expires: "到期",
    revoked: "已吊销", revoke: "吊销", "confirm.revoke": "吊销令牌 {id}？之后使用它的请求都会被拒绝。",
    revokedMsg: "令牌 {id} 已吊销", noTokenApi: "此服务端没有令牌列表。", failed: "失败：{code}",
    metadata: "元数据", sourceFilters: "知识库过滤", filter: "过滤条件（{…} 中的值来自可信上下文）",
  },
};

// The seed's troubleshooting table (控制台与排障), by symptom and by typed error code.
const HINTS = {
  notPlanned: {
    en: "Check knowledge.planned sources and reasons; compare the query terms, tags, trusted context and maxSources.",
    zh: "查看 knowledge.planned 的 sources/reason；核对词项、标签、可信上下文与 maxSources。",
  },
  noCitations: {
    en: "Check whether knowledge.retrieved is EMPTY, the fused count and the char budget; nothing is forced in without a match.",
    zh: "查看 knowledge.retrieved 是否 EMPTY、融合 count 和正文额度；无匹配不强塞文档。",
  },
  KNOWLEDGE_BUDGET_EXCEEDED: {
    en: "The source requests reached the total or the per-source limit; the call is not retried automatically.",
    zh: "实际来源次数已达总数或单库上限；不自动重试。",
  },
  KNOWLEDGE_SOURCE_DENIED: {
    en: "sources is outside allowedKnowledge, names a wrong exact version, or repeats a key.",
    zh: "sources 超过授权范围、错精确版本或重复键。",
  },
  transient: {
    en: "A source is temporarily unavailable: FAIL_FAST ends the call; SKIP_TRANSIENT skips only timeouts, unavailability and throttling.",
    zh: "单库暂时不可用：FAIL_FAST 终止；SKIP_TRANSIENT 仅跳过超时、不可用与限流。",
  },
  fatal: {
    en: "Both failure policies end the call: a partial success never bypasses permissions or the protocol.",
    zh: "两种策略均终止，不能借部分成功绕过权限或协议验证。",
  },
  knowledge_reference_expired: { en: "The ref is older than 300 s: search again.", zh: "引用已超过 300 秒：请重新检索。" },
  knowledge_changed: { en: "The document changed or left the scope: search again.", zh: "文档已变化或不在范围内：请重新检索。" },
  knowledge_scope_changed: { en: "The workspace's knowledge scope changed: search again.", zh: "工作区知识范围已变化：请重新检索。" },
  knowledge_reference_invalid: { en: "The ref or cursor is not one this server issued for this caller.", zh: "引用或游标不是服务端为此调用方签发的。" },
};
const HINT_OF_CODE = {
  KNOWLEDGE_UNAVAILABLE: "transient", KNOWLEDGE_TIMEOUT: "transient", KNOWLEDGE_THROTTLED: "transient",
  KNOWLEDGE_ACCESS_DENIED: "fatal", PROTOCOL_ERROR: "fatal", KNOWLEDGE_SOURCE_ERROR: "fatal",
};
const SEARCH_MAX_BYTES = 4096;
const INVOKE = "/2015-03-31/functions/AgentToolsFunction/invocations";

let lang = localStorage.getItem("kb-console-lang") || (navigator.language.startsWith("zh") ? "zh" : "en");
const tokens = new Map(); // route + tenant -> a console token for the public API

// A path segment: percent-encoded, but `@` kept as is (exact keys are id@version; RFC 3986 allows it).
function seg(value) {
  return encodeURIComponent(value).replace(/%40/g, "@");
}

function t(key, vars = {}) {
  const text = STRINGS[lang][key] ?? STRINGS.en[key] ?? key;
  return text.replace(/\{(\w+)\}/g, (_, name) => String(vars[name] ?? ""));
}

function hintFor(code) {
  const hint = HINTS[code] || HINTS[HINT_OF_CODE[code]];
  return hint ? hint[lang] : "";
}

// Elements are built with text nodes only: nothing from the server is ever parsed as HTML.
function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith("on")) el.addEventListener(name.slice(2), value);
    else if (name === "text") el.textContent = value;
    else el.setAttribute(name, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

// Replace an element's children: arrays flattened, absent parts (null, undefined, false) left out.
function fill(el, ...children) {
  el.replaceChildren(...children.flat().filter((c) => c !== null && c !== undefined && c !== false));
}

class ApiError extends Error {
  constructor(status, body) {
    const code = body?.error?.code || body?.message || String(status);
    super(code);
    this.status = status;
    this.code = code;
    this.body = body;
  }
}

// G-LOCAL: the admin and Invoke APIs need the local operator credential. kb serve prints the console's URL
// with it in the fragment (never sent in a request); it is kept in this tab's sessionStorage only.
const OPERATOR_KEY = "kb-operator";
const OPERATOR_HEADER = "X-Kb-Operator";

function takeOperatorCredential() {
  const match = /^#operator=([^&]+)$/.exec(location.hash);
  if (!match) return;
  sessionStorage.setItem(OPERATOR_KEY, decodeURIComponent(match[1]));
  history.replaceState(null, "", location.pathname + location.search);  // off the address bar and history
}

function operatorPath(path) {
  return path.startsWith("/admin/") || path.startsWith("/2015-03-31/functions/");
}

async function api(method, path, body, token) {
  const headers = { "Content-Type": "application/json" };
  if (token) headers.Authorization = `Bearer ${token}`;
  if (operatorPath(path)) headers[OPERATOR_HEADER] = sessionStorage.getItem(OPERATOR_KEY) || "";
  const response = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const raw = await response.text();
  let data = null;
  try { data = raw ? JSON.parse(raw) : null; } catch { data = { message: raw.slice(0, 200) }; }
  if (response.status === 401 && operatorPath(path)) {
    sessionStorage.removeItem(OPERATOR_KEY);  // wrong (kb serve's state was replaced): ask for the URL again
    throw new ApiError(401, { error: { code: "operator_credential", message: t("operatorMissing") } });
  }
  if (!response.ok) throw new ApiError(response.status, data);
  return { data, bytes: new TextEncoder().encode(raw).length };
}

function say(message) {
  const status = document.getElementById("status");
  status.textContent = message;
  clearTimeout(say.timer);
  say.timer = setTimeout(() => { status.textContent = ""; }, 6000);
}

function quiet() {  // moving to another view drops the last view's message
  clearTimeout(say.timer);
  document.getElementById("status").textContent = "";
}

function confirmAction(message) {
  const dialog = document.getElementById("confirm");
  document.getElementById("confirm-text").textContent = message;
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => resolve(dialog.returnValue === "ok"), { once: true });
    dialog.returnValue = "";
    dialog.showModal();
    document.getElementById("confirm-ok").focus();
  });
}

function table(caption, columns, rows) {
  if (!rows.length) return h("p", { class: "muted", text: t("none") });
  return h("div", { class: "scroll" },
    h("table", {},
      h("caption", { class: "muted", text: caption }),
      h("thead", {}, h("tr", {}, columns.map((c) => h("th", { scope: "col", text: c })))),
      h("tbody", {}, rows.map((cells) => h("tr", {}, cells.map((c) => h("td", {}, c)))))));
}

function field(label, input) {
  return h("label", {}, h("span", { text: label }), input);
}

function errorBox(error) {
  const code = error.code || String(error);
  const hint = hintFor(code);
  return h("div", { class: "error-box", role: "alert" },
    h("strong", { text: t("errorCode", { code }) }),
    error.body?.error?.message ? h("p", { text: error.body.error.message }) : null,
    hint ? h("p", {}, h("strong", { text: `${t("hint")}: ` }), hint) : null);
}

function yesNo(value) {
  return h("span", { class: value ? "ok" : "bad", text: value ? t("yes") : t("no") });
}

// --- sources -------------------------------------------------------------------------------------------------

async function renderSources(view) {
  const { data } = await api("GET", "/admin/v1/sources");
  const docs = h("section", { "aria-live": "polite" });
  // The documents shown and the upload's source are one choice: opening a source's documents points the
  // upload at it, and choosing the upload's source shows its documents (a file meant for the source on
  // screen once went to the first one listed).
  const showDocs = async (key) => {
    sourceSelect.value = key;
    const { data: list } = await api("GET", `/admin/v1/sources/${seg(key)}/documents`);
    fill(docs, 
      h("h3", { text: t("docs.title", { source: key }) }),
      table(t("docs.title", { source: key }), [t("docId"), t("title"), t("revision"), t("tenant"), t("metadata"), t("status"), t("size"), t("updated"), t("actions")],
        list.documents.map((d) => [
          h("code", { text: d.doc_id }), d.title, h("code", { title: d.revision, text: d.revision.slice(7, 19) }), d.tenant || "—",
          metadataView(d.metadata),
          h("span", { class: d.status === "ready" ? "ok" : "warn", text: d.status }), d.chars, d.updated_at,
          h("div", { class: "row" },
            h("button", { type: "button", text: d.status === "ready" ? t("disable") : t("enable"),
              onclick: async () => {
                const action = d.status === "ready" ? "disable" : "enable";
                await act(() => api("POST", `/admin/v1/sources/${seg(key)}/documents/${seg(d.doc_id)}/${action}`, {}));
                showDocs(key);
              } }),
            h("button", { type: "button", class: "danger", text: t("delete"),
              onclick: async () => {
                if (!(await confirmAction(t("confirm.delete", { doc: d.doc_id, source: key })))) return;
                await act(() => api("DELETE", `/admin/v1/sources/${seg(key)}/documents/${seg(d.doc_id)}`));
                showDocs(key);
              } })),
        ])),
      list.truncated ? h("p", { class: "muted", text: t("truncatedList", { n: list.documents.length }) }) : null);
  };
  const sourceSelect = h("select", { name: "source", onchange: () => showDocs(sourceSelect.value) },
    data.sources.map((s) => h("option", { value: s.key, text: s.key })));
  const fileInput = h("input", { type: "file", name: "file", multiple: true, accept: ".md,.markdown,.txt,.html,.htm,.pdf,.docx" });
  const docIdInput = h("input", { name: "doc_id", placeholder: t("docIdOrPrefix") });
  const tenantInput = h("input", { name: "tenant", value: "default" });
  const upload = h("form", { class: "grid", onsubmit: async (event) => {
    event.preventDefault();
    const files = Array.from(fileInput.files);
    if (!files.length) return;
    // The files' bytes go through ingestion jobs, so PDF, HTML and DOCX are extracted as `kb ingest` does,
    // and the service names a file sent without a doc id as `kb ingest` does (`阀门检修.pdf` -> `FaMenJianXiu-…`).
    // Two files of one name but their suffix (`a.md`, `a.txt`) would be one document: refused before any job.
    const stems = new Map();
    for (const file of files) {
      const stem = file.name.replace(/\.[^.]*$/, "");
      if (stems.has(stem)) { say(t("sameId", { a: stems.get(stem), b: file.name })); return; }
      stems.set(stem, file.name);
    }
    const given = docIdInput.value.trim();
    const acl = { tenant: tenantInput.value.trim() || "default" };
    const documents = [];
    for (const file of files) {
      documents.push({ ...(given && files.length === 1 ? { doc_id: given } : {}), filename: file.name,
        content_base64: await base64Of(file), acl, structured_source: { uri: file.name } });
    }
    const source = sourceSelect.value;
    const failed = [], running = [];
    for (const batch of jobBatches(documents)) {
      const body = { documents: batch, ...(given && files.length > 1 ? { doc_id_prefix: given } : {}) };
      const job = await act(() => api("POST", `/admin/v1/sources/${seg(source)}/ingestion-jobs`, body));
      const done = await waitForJob(source, job.data.job_id);
      if (!done) running.push(...batch.map((d) => ({ name: d.filename, job: job.data.job_id })));
      else failed.push(...done.errors.map((e) => ({ name: e.uri || e.doc_id, code: e.code })));
    }
    if (files.length === 1) {
      const name = given || files[0].name;
      if (running.length) say(t("uploadPending", { doc: name, job: running[0].job }));
      else if (failed.length) say(t("uploadFailed", { doc: name, code: failed[0].code }));
      else say(t("uploaded", { doc: name, source }));
    } else {
      say([t("uploadedMany", { done: files.length - failed.length - running.length, total: files.length, source }),
        failed.length ? t("notIngested", { list: failed.map((f) => `${f.name} (${f.code})`).join(", ") }) : "",
        running.length ? t("stillRunning", { list: running.map((r) => r.name).join(", ") }) : ""].filter(Boolean).join("; "));
    }
    showDocs(sourceSelect.value);
  } },
    field(t("source"), sourceSelect), field(t("file"), fileInput), field(t("docId"), docIdInput),
    field(t("tenant"), tenantInput), h("button", { type: "submit", class: "primary", text: t("upload") }));
  // The search index's state is an aside: its backend failing leaves the rest of the page as it is.
  const indices = await api("GET", "/admin/v1/search-indices").then((r) => r.data, (error) => ({ error }));
  const compact = h("button", { type: "button", text: t("compact"), onclick: async () => {
    const { data: done } = await act(() => api("POST", "/admin/v1/search-indices/compact", {}));
    await route();
    say(t(done.started ? "compactStarted" : "compactNothing"));
  } });
  fill(view, 
    h("h2", { tabindex: "-1", text: t("sources.title") }),
    table(t("sources.title"), [t("key"), t("description"), t("status"), t("enabled"), t("lease"), t("searchable"), t("actions")],
      data.sources.map((s) => [
        h("code", { text: s.key }), s.description, s.status, yesNo(s.enabled), s.lease_until || "—", yesNo(s.searchable),
        h("div", { class: "row" },
          h("button", { type: "button", text: t("documents"), onclick: () => showDocs(s.key) }),
          h("button", { type: "button", text: s.enabled ? t("disable") : t("enable"),
            onclick: async () => {
              await act(() => api("POST", `/admin/v1/sources/${seg(s.key)}/${s.enabled ? "disable" : "enable"}`, {}));
              route();
            } })),
      ])),
    docs,
    h("h3", { text: t("upload.title") }), upload,
    h("h3", { text: t("index.title") }),
    indices.error ? errorBox(indices.error) : table(t("index.title"),
      [t("index"), t("shards"), t("segments"), t("target"), t("indexSize"), t("fragmented"), t("merging")],
      indices.indices.map((i) => [h("code", { text: i.index }), i.shards, i.segments, i.target_segments,
        byteSize(i.size_bytes), h("span", { class: i.fragmented ? "warn" : "ok", text: t(i.fragmented ? "yes" : "no") }),
        t(i.merging ? "yes" : "no")])),
    indices.indices?.length ? compact : null);
}

function byteSize(n) {
  const units = ["B", "KiB", "MiB", "GiB"];
  let size = n, unit = 0;
  while (size >= 1024 && unit < units.length - 1) { size /= 1024; unit += 1; }
  return unit ? `${size.toFixed(1)} ${units[unit]}` : `${n} B`;
}

async function base64Of(file) {
  const bytes = new Uint8Array(await file.arrayBuffer());
  let binary = "";
  for (let i = 0; i < bytes.length; i += 0x8000) binary += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return btoa(binary);
}

// Jobs of at most 500 documents and about 5 MB of file bytes each, as `kb ingest` sends several files.
function jobBatches(documents) {
  const batches = [];
  let batch = [], size = 0;
  for (const d of documents) {
    const weight = d.content_base64.length;
    if (batch.length && (batch.length >= 500 || size + weight > 5_000_000)) { batches.push(batch); batch = []; size = 0; }
    batch.push(d);
    size += weight;
  }
  if (batch.length) batches.push(batch);
  return batches;
}

async function waitForJob(source, jobId) {
  for (let i = 0; i < 300; i++) {
    const { data } = await api("GET", `/admin/v1/sources/${seg(source)}/ingestion-jobs/${seg(jobId)}`);
    if (data.state === "completed") return data;
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
  return null;
}

async function act(call, message) {
  try {
    const result = await call();
    if (message) say(message);
    return result;
  } catch (error) {
    say(t("failed", { code: error.code || String(error) }));
    throw error;
  }
}

// A document's metadata (SPEC §8) as `key = value` lines; lists as JSON, so ["a","b"] reads as a list.
function metadataView(metadata) {
  const entries = Object.entries(metadata || {});
  if (!entries.length) return "—";
  return h("ul", { class: "plain" }, entries.map(([k, v]) =>
    h("li", {}, h("code", { text: `${k} = ${typeof v === "string" ? v : JSON.stringify(v)}` }))));
}

// --- agents and workspaces ------------------------------------------------------------------------------------

// A sourceFilters filter (SPEC §3.1, §8) as one readable line: `{"context": "region"}` shows as {region}.
function filterText(filter) {
  const [op, arg] = Object.entries(filter || {})[0] || ["", null];
  if (op === "andAll" || op === "orAll") return `${op}(${arg.map(filterText).join(", ")})`;
  const value = arg && arg.value;
  const shown = value && typeof value === "object" && !Array.isArray(value) && "context" in value
    ? `{${value.context}}` : JSON.stringify(value);
  return `${arg ? arg.key : "?"} ${op} ${shown}`;
}

function routingView(agent) {
  const routing = agent.definition.knowledgeRouting || {};
  const budgets = [
    [t("maxRetrievals"), routing.maxRetrievals ?? 8], [t("maxPerSource"), routing.maxQueriesPerSource ?? 3],
    [t("maxChars"), routing.maxContextChars ?? 16000], [t("sourceMax"), routing.sourceMaxChars ?? 16000],
    [t("topK"), routing.topK ?? 8], [t("maxSources"), routing.maxSources ?? 4],
    [t("failure"), routing.failurePolicy ?? "FAIL_FAST"], [t("rerank"), routing.rerank ?? "NONE"],
  ];
  const rules = (routing.rules || []).map((r) => [
    h("code", { text: `${r.knowledge.id}@${r.knowledge.version}` }), (r.queryTerms || []).join(", ") || "—",
    (r.tags || []).join(", ") || "—",
    Object.entries(r.contextEquals || {}).map(([k, v]) => `${k} = ${v}`).join(", ") || "—",
    yesNo(Boolean(r.always)), r.priority ?? 0,
  ]);
  const filters = (routing.sourceFilters || []).map((f) => [
    h("code", { text: `${f.knowledge.id}@${f.knowledge.version}` }), h("code", { text: filterText(f.filter) }),
  ]);
  return h("div", {},
    h("p", {}, h("strong", { text: `${t("budgets")}: ` }), budgets.map(([k, v]) => `${k} ${v}`).join(" · ")),
    h("p", {}, h("strong", { text: `${t("allowed")}: ` }),
      (agent.definition.allowedKnowledge || []).map((k) => `${k.id}@${k.version}`).join(", ") || "—"),
    rules.length ? table(t("rules"), [t("source"), t("terms"), t("tags"), t("context"), t("always"), t("priority")], rules) : null,
    filters.length ? table(t("sourceFilters"), [t("source"), t("filter")], filters) : null);
}

async function renderAgents(view) {
  const [{ data: agents }, { data: workspaces }] = await Promise.all([
    api("GET", "/admin/v1/agents"), api("GET", "/admin/v1/workspaces")]);
  const keys = agents.agents.map((a) => a.key);
  const wsRows = workspaces.workspaces.map((w) => {
    const sameId = keys.filter((k) => k.split("@")[0] === w.agent.split("@")[0] && k !== w.agent);
    const choices = [...sameId, ...keys.filter((k) => !sameId.includes(k) && k !== w.agent)];
    const select = h("select", { "aria-label": `${t("pointTo")} (${w.route})` }, choices.map((k) => h("option", { value: k, text: k })));
    return [h("code", { text: w.route }), h("code", { text: w.agent }),
      choices.length ? h("div", { class: "row" }, select,
        h("button", { type: "button", text: t("point"), onclick: async () => {
          if (!(await confirmAction(t("confirm.point", { route: w.route, from: w.agent, to: select.value })))) return;
          await act(() => api("PUT", `/admin/v1/workspaces/${seg(w.route)}`, { agent: select.value }),
            t("pointed", { route: w.route, to: select.value }));
          route();
        } })) : "—"];
  });
  fill(view, 
    h("h2", { tabindex: "-1", text: t("nav.agents") }),
    h("h3", { text: t("workspaces.title") }),
    table(t("workspaces.title"), [t("route"), t("agent"), t("pointTo")], wsRows),
    h("h3", { text: t("agents.title") }),
    ...agents.agents.map((a) => h("article", { class: "card", "aria-label": a.key },
      h("h4", {}, h("code", { text: a.key })),
      h("p", {}, h("strong", { text: `${t("mode")}: ` }), a.mode || t("legacy"),
        " · ", h("strong", { text: `${t("routes")}: ` }), a.routes.join(", ") || "—"),
      h("p", {}, h("strong", { text: `${t("precheck")}: ` }),
        h("span", { class: "ok", text: a.tool_mode ? t("precheckOk") : t("precheckNotNeeded") })),
      h("p", {}, h("strong", { text: `${t("models")}: ` }), a.models.map((m) => h("span", { class: m.compatible ? "ok" : "bad" },
        `${m.model} (toolCalling ${m.tool_calling ?? "—"}: ${m.compatible ? t("compatible") : t("incompatible")}) `))),
      routingView(a))));
}

// --- try it ----------------------------------------------------------------------------------------------------

// Why a search answered no hints, from the admin listings (the protocol's bodies stay as they are): the
// route's agent and routing as the service plans a search (no trusted context), then the tenant's documents.
async function whyEmpty(routeName, query, tenant) {
  const [{ data: ws }, { data: ag }, { data: src }] = await Promise.all(
    ["/admin/v1/workspaces", "/admin/v1/agents", "/admin/v1/sources"].map((p) => api("GET", p)));
  const agentKey = (ws.workspaces.find((w) => w.route === routeName) || {}).agent;
  const agent = ag.agents.find((a) => a.key === agentKey);
  if (!agent) return [t("why.noAgent", { route: routeName })];
  const def = agent.definition;
  const sources = new Map(src.sources.map((s) => [s.key, s]));
  const allowed = (def.allowedKnowledge || []).map((k) => `${k.id}@${k.version}`);
  const searchable = allowed.filter((k) => sources.get(k) && sources.get(k).searchable);
  const routing = def.knowledgeRouting || {};
  const planned = ["AUTO", "ON_DEMAND"].includes(routing.mode) ? routed(routing, searchable, sources, query) : searchable;
  if (!planned.length) {
    const reasons = [t("why.noSource", { agent: agent.key, mode: routing.mode || "legacy" })];
    allowed.filter((k) => !searchable.includes(k)).forEach((k) => reasons.push(t("why.unsearchable", { source: k })));
    (routing.rules || []).forEach((rule) => reasons.push(t("why.rule", { source: `${rule.knowledge.id}@${rule.knowledge.version}`,
      needs: Object.entries(rule.contextEquals || {}).map(([k, v]) => `${k}=${v}`).join(", ") || "—" })));
    reasons.push(t("why.noMatch"));
    return reasons;
  }
  return Promise.all(planned.map(async (key) => {
    const { data } = await api("GET", `/admin/v1/sources/${seg(key)}/documents`);
    const mine = data.documents.filter((d) => d.tenant === tenant && d.status === "ready").length;
    if (!mine) return t("why.noDocs", { source: key, tenant, tenants: [...new Set(data.documents.map((d) => d.tenant || "—"))].join(", ") || "—" });
    return t("why.minScore", { source: key, n: mine, tenant, min: sources.get(key).min_score });
  }));
}

// The router's AUTO rule (knowledge_core/domain/router.py) for a search, which carries no trusted context.
function routed(routing, searchable, sources, query) {
  const lowered = query.toLowerCase();
  const ruled = new Set((routing.rules || []).map((r) => `${r.knowledge.id}@${r.knowledge.version}`));
  const byRule = (routing.rules || []).filter((r) => {
    if (Object.keys(r.contextEquals || {}).length) return false;
    if (r.always) return true;
    if (r.queryTerms && r.queryTerms.length && !r.queryTerms.some((q) => lowered.includes(q.toLowerCase()))) return false;
    return true;
  }).map((r) => `${r.knowledge.id}@${r.knowledge.version}`).filter((k) => searchable.includes(k));
  const words = lowered.split(/[^\p{L}\p{N}]+/u).filter((w) => w.length > 1);
  const byText = searchable.filter((k) => !ruled.has(k) && words.some((w) =>
    `${sources.get(k).description} ${sources.get(k).tags.join(" ")}`.toLowerCase().includes(w)));
  return [...byRule, ...byText];
}

async function consoleToken(routeName, tenant) {
  const key = `${routeName}\u0000${tenant}`;
  if (!tokens.has(key)) {
    const { data } = await api("POST", "/admin/v1/tokens", {
      routes: [routeName], client_id: "console", subject: "console", tenant, ttl_seconds: 900 });
    tokens.set(key, data.token);
  }
  return tokens.get(key);
}

function searchPanel(workspaces) {
  // The demo route by default (the seeded one, whose sample query finds something), else the first.
  const routeSelect = h("select", { name: "route" }, workspaces.map((w) =>
    h("option", { value: w.route, text: w.route, selected: w.route === "demo" })));
  const tenant = h("input", { name: "tenant", value: "default" });
  const query = h("input", { name: "query", required: true, value: "网关离线怎么排查？" });
  const limit = h("input", { name: "limit", type: "number", min: "1", max: "3", value: "3" });
  const maxBytes = h("input", { name: "max_bytes", type: "number", min: "4096", max: "16384", step: "1024", value: "4096" });
  const results = h("div", { "aria-live": "polite" });
  const reader = h("div", { "aria-live": "polite" });

  const readFrom = async (token, ref, cursor, pageNo) => {
    const body = { ref, max_bytes: Number(maxBytes.value) };
    if (cursor) body.cursor = cursor;
    try {
      const { data, bytes } = await api("POST", `/agent-api/v1/workspaces/${seg(routeSelect.value)}/knowledge/read`, body, token);
      const last = data.next_cursor === null;
      reader.append(h("section", { class: "card", "aria-label": t("pageOf", { n: pageNo }) },
        h("p", { class: "meter" }, h("strong", { text: `${t("pageOf", { n: pageNo })} · ` }),
          t("bytes", { n: bytes, max: body.max_bytes }), " · ", t("total", { n: data.total_content_bytes })),
        h("div", { class: "page", text: data.content }),
        last ? h("p", { class: "ok", text: data.budget_exhausted ? t("chainEnd") : t("endOfDoc") })
          : h("button", { type: "button", class: "primary", text: t("next"),
            onclick: (event) => { event.target.remove(); readFrom(token, ref, data.next_cursor, pageNo + 1); } })));
      reader.lastElementChild.setAttribute("tabindex", "-1");
      if (pageNo > 1) reader.lastElementChild.focus();
    } catch (error) {
      reader.append(errorBox(error));
    }
  };

  const form = h("form", { class: "grid", onsubmit: async (event) => {
    event.preventDefault();
    fill(results, h("p", { text: t("loading") }));
    fill(reader);
    try {
      const token = await consoleToken(routeSelect.value, tenant.value.trim() || "default");
      const { data, bytes } = await api("POST", `/agent-api/v1/workspaces/${seg(routeSelect.value)}/knowledge/search`,
        { query: query.value, limit: Number(limit.value) }, token);
      fill(results, 
        h("p", { class: "meter", text: t("searchStatus", { status: data.status, n: data.hints.length, bytes, max: SEARCH_MAX_BYTES }) }),
        h("ol", {}, data.hints.map((hint) => h("li", { class: "card" },
          h("strong", { text: hint.title }), ` · score ${hint.score}`,
          h("p", { text: hint.summary }),
          h("button", { type: "button", text: t("read"), onclick: () => { fill(reader); readFrom(token, hint.ref, null, 1); } })))),
        data.hints.length ? null : h("section", { class: "card", "aria-label": t("why.title") },
          h("strong", { text: t("why.title") }),
          h("ul", {}, (await whyEmpty(routeSelect.value, query.value, tenant.value.trim() || "default")).map((r) => h("li", { text: r })))));
    } catch (error) {
      fill(results, errorBox(error));
    }
  } },
    field(t("route"), routeSelect), field(t("tenant"), tenant), field(t("query"), query), field(t("limit"), limit),
    field(t("maxBytes"), maxBytes), h("button", { type: "submit", class: "primary", text: t("search") }));
  return h("section", { "aria-labelledby": "try-search" },
    h("h3", { id: "try-search", text: t("try.search") }), form, results, reader);
}

function parseAncestors(text) {
  return text.split("\n").map((line) => line.trim()).filter(Boolean).map((line) => {
    const [invocation_id, agent] = line.split(/\s+/);
    if (!invocation_id || !agent || !agent.includes("@")) throw new Error(t("badAncestors"));
    return { invocation_id, agent };
  });
}

function eventItem(event, agent) {
  if (event.type === "knowledge.planned") {
    const planned = new Set(event.sources.map((s) => s.knowledge));
    const missing = (agent?.definition.allowedKnowledge || []).map((k) => `${k.id}@${k.version}`).filter((k) => !planned.has(k));
    return h("li", {},
      h("strong", { text: t("planned") }),
      h("ul", {}, event.sources.map((s) => h("li", {}, h("code", { text: s.knowledge }), ` — ${t("reason")}: ${s.reason}`))),
      missing.length ? h("div", { class: "warn" },
        h("strong", { text: `${t("notPlanned")}: ` }), missing.join(", "),
        h("p", {}, h("strong", { text: `${t("hint")}: ` }), hintFor("notPlanned"))) : null);
  }
  if (event.type === "knowledge.retrieved") {
    const bad = !["OK", "EMPTY"].includes(event.status);
    return h("li", {},
      h("strong", { text: t("retrieved") }), " ", h("code", { text: event.knowledge }), " ",
      h("span", { class: `badge ${bad ? "bad" : event.status === "OK" ? "ok" : "warn"}`, text: event.status }),
      ` ${t("count")} ${event.count} · ${event.ms} ${t("ms")}`,
      event.status === "EMPTY" ? h("p", { class: "muted" }, h("strong", { text: `${t("hint")}: ` }), hintFor("noCitations")) : null,
      bad && hintFor(event.status) ? h("p", { class: "muted" }, h("strong", { text: `${t("hint")}: ` }), hintFor(event.status)) : null);
  }
  if (event.type === "knowledge.fused") {
    return h("li", {},
      h("strong", { text: t("fused") }), ` ${t("count")} ${event.count} · ${t("rerank")} ${event.rerank} · `,
      `${t("retrievals")}: ${t("used", { used: event.retrievalsUsed, left: event.retrievalsRemaining })} · `,
      `${t("chars")}: ${t("used", { used: event.charsUsed, left: event.charsRemaining })}`,
      event.count === 0 ? h("p", { class: "muted" }, h("strong", { text: `${t("hint")}: ` }), hintFor("noCitations")) : null);
  }
  if (event.type === "citation.created") {
    return h("li", {}, h("strong", { text: t("cited") }), " ", h("code", { text: event.citationId }),
      ` ${event.knowledgeVersion} · fusion ${event.fusionScore}`);
  }
  return h("li", { text: event.type });
}

function toolPanel(agents) {
  const agentSelect = h("select", { name: "agent" }, agents.map((a) => h("option", { value: a.key, text: a.key })));
  const preferred = agents.find((a) => a.key.startsWith("demo-router@"));
  if (preferred) agentSelect.value = preferred.key;
  const operation = h("select", { name: "operation" }, ["knowledge_search", "startup"].map((o) => h("option", { value: o, text: o })));
  const query = h("input", { name: "query", required: true, value: "设备安装规范" });
  const sources = h("input", { name: "sources", placeholder: "id@version, …" });
  const context = h("textarea", { name: "trusted_context" }, '{"projectType": "monitor"}');
  const ancestors = h("textarea", { name: "ancestors", placeholder: "inv-1 demo-agent@1.0.0" });
  const tenant = h("input", { name: "tenant", value: "default" });
  const out = h("div", { "aria-live": "polite" });
  const form = h("form", { class: "grid", onsubmit: async (event) => {
    event.preventDefault();
    fill(out, h("p", { text: t("loading") }));
    let trusted;
    let chain;
    try {
      trusted = JSON.parse(context.value.trim() || "{}");
      if (typeof trusted !== "object" || Array.isArray(trusted) || trusted === null) throw new Error();
    } catch {
      fill(out, h("p", { class: "bad", role: "alert", text: t("badJson") }));
      return;
    }
    try { chain = parseAncestors(ancestors.value); } catch (error) {
      fill(out, h("p", { class: "bad", role: "alert", text: error.message }));
      return;
    }
    const id = `console-${crypto.randomUUID().slice(0, 8)}`;
    const args = { query: query.value };
    const keys = sources.value.split(",").map((s) => s.trim()).filter(Boolean);
    if (keys.length && operation.value === "knowledge_search") args.sources = keys;
    const envelope = { operation: operation.value, arguments: args, invocation: {
      tenant: tenant.value.trim() || "default", app: "console", subject: "console", agent: agentSelect.value,
      invocation_id: id, ancestors: chain, trusted_context: trusted } };
    try {
      const { data } = await api("POST", INVOKE, envelope);
      if (data.errorType) throw new ApiError(500, { message: data.errorType });
      const agent = agents.find((a) => a.key === agentSelect.value);
      const root = chain.length ? chain[0].invocation_id : id;
      const parts = [
        data.error ? errorBox(new ApiError(200, data)) : null,
        h("h4", { text: t("timeline") }),
        h("ol", { class: "timeline" }, data.events.map((e) => eventItem(e, agent))),
      ];
      if (data.references?.length) {
        parts.push(h("h4", { text: t("references") }), h("ol", {}, data.references.map((r) => h("li", { class: "card" },
          h("code", { text: r.citationId }), ` ${r.knowledge.id}@${r.knowledge.version} · ${r.source?.title || ""}`,
          h("p", { class: "page", text: r.content.slice(0, 600) })))));
      }
      try {
        const { data: ledger } = await api("GET", `/admin/v1/ledgers/${seg(root)}`);
        parts.push(h("h4", { text: t("ledger") }), table(t("ledger"),
          [t("invocation"), t("agent"), t("retrievals"), t("maxPerSource"), t("chars")],
          ledger.entries.map((e) => [h("code", { text: e.invocation_id }), h("code", { text: e.agent }),
            t("used", { used: `${e.retrievals}/${e.max_retrievals}`, left: e.retrievals_remaining }),
            Object.entries(e.per_source).map(([k, v]) => `${k}: ${v}/${e.max_queries_per_source}`).join(", ") || "—",
            t("used", { used: `${e.chars}/${e.max_context_chars}`, left: e.chars_remaining })])));
      } catch { /* nothing charged yet: no ledger to show */ }
      fill(out, parts);
    } catch (error) {
      fill(out, errorBox(error));
    }
  } },
    field(t("agent"), agentSelect), field(t("operation"), operation), field(t("query"), query),
    field(t("sourcesArg"), sources), field(t("tenant"), tenant), field(t("trusted"), context),
    field(t("ancestors"), ancestors), h("button", { type: "submit", class: "primary", text: t("run") }));
  return h("section", { "aria-labelledby": "try-tool" }, h("h3", { id: "try-tool", text: t("try.tool") }), form, out);
}

async function renderTry(view) {
  const [{ data: workspaces }, { data: agents }] = await Promise.all([
    api("GET", "/admin/v1/workspaces"), api("GET", "/admin/v1/agents")]);
  fill(view, h("h2", { tabindex: "-1", text: t("try.title") }),
    searchPanel(workspaces.workspaces), toolPanel(agents.agents));
}

// --- tokens ----------------------------------------------------------------------------------------------------

async function renderTokens(view) {
  const routes = h("input", { name: "routes", value: "demo", required: true });
  const subject = h("input", { name: "subject", value: "user" });
  const client = h("input", { name: "client_id", value: "console" });
  const tenant = h("input", { name: "tenant", value: "default" });
  const ttl = h("input", { name: "ttl_seconds", type: "number", min: "60", value: "3600" });
  const issued = h("div", { "aria-live": "polite" });
  const list = h("div");
  const refresh = async () => {
    try {
      const { data } = await api("GET", "/admin/v1/tokens");
      fill(list, table(t("tokens.title"), [t("tokenId"), t("client"), t("subject"), t("tenant"), t("routes"), t("expires"), t("revoked"), t("actions")],
        data.tokens.map((k) => [h("code", { text: k.token_id }), k.client_id, k.subject, k.tenant, k.routes.join(", "),
          new Date(k.expires_at * 1000).toISOString().replace(".000", ""), yesNo(k.revoked),
          k.revoked ? "—" : h("button", { type: "button", class: "danger", text: t("revoke"), onclick: async () => {
            if (!(await confirmAction(t("confirm.revoke", { id: k.token_id })))) return;
            await act(() => api("POST", `/admin/v1/tokens/${seg(k.token_id)}/revoke`, {}), t("revokedMsg", { id: k.token_id }));
            refresh();
          } })])));
    } catch (error) {
      fill(list, error.status === 404 || error.status === 405 ? h("p", { class: "muted", text: t("noTokenApi") }) : errorBox(error));
    }
  };
  const form = h("form", { class: "grid", onsubmit: async (event) => {
    event.preventDefault();
    try {
      const { data } = await api("POST", "/admin/v1/tokens", {
        routes: routes.value.split(",").map((r) => r.trim()).filter(Boolean), subject: subject.value,
        client_id: client.value, tenant: tenant.value, ttl_seconds: Number(ttl.value) });
      fill(issued, h("div", { class: "card" },
        h("p", { text: t("issued", { id: data.token_id || data.session_id }) }),
        h("code", { class: "mono", "data-token": "", text: data.token })));
      refresh();
    } catch (error) {
      fill(issued, errorBox(error));
    }
  } },
    field(t("routesCsv"), routes), field(t("subject"), subject), field(t("client"), client), field(t("tenant"), tenant),
    field(t("ttl"), ttl), h("button", { type: "submit", class: "primary", text: t("issue") }));
  fill(view, h("h2", { tabindex: "-1", text: t("tokens.title") }), form, issued, list);
  await refresh();
}

// --- shell ------------------------------------------------------------------------------------------------------

const VIEWS = { sources: renderSources, agents: renderAgents, try: renderTry, tokens: renderTokens };

function applyLanguage() {
  document.documentElement.lang = lang === "zh" ? "zh-CN" : "en";
  document.title = t("brand");
  for (const el of document.querySelectorAll("[data-i18n]")) el.textContent = t(el.dataset.i18n);
  for (const el of document.querySelectorAll("[data-i18n-aria]")) el.setAttribute("aria-label", t(el.dataset.i18nAria));
  document.getElementById("lang").textContent = t("other");
}

// How searches rank now, one line in the header: looked at again every few seconds while vectors fill.
let rankingState = null;
async function showRanking() {
  if (!sessionStorage.getItem(OPERATOR_KEY)) return;  // an admin call: only with the operator credential
  try {
    const { data } = await api("GET", "/admin/v1/search-indices");
    rankingState = data.ranking;
  } catch {
    rankingState = null;
  }
  renderRanking();
  if (rankingState?.vectors === "filling") setTimeout(showRanking, 5000);
}

function renderRanking() {
  const state = rankingState;
  const key = !state ? null : state.vectors === "filling" ? "filling" : state.mode === "hybrid" ? "hybrid" : "none";
  document.getElementById("ranking").textContent = key ? t(`ranking.${key}`) : "";
}

async function route() {
  const name = (location.hash || "#sources").slice(1);
  const render = VIEWS[name] || renderSources;
  for (const link of document.querySelectorAll("nav a")) {
    if (link.getAttribute("href") === `#${name}`) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  const view = document.getElementById("view");
  if (!sessionStorage.getItem(OPERATOR_KEY)) {
    fill(view, h("div", { class: "error-box", role: "alert", id: "operator-missing" }, h("p", { text: t("operatorMissing") })));
    return;
  }
  fill(view, h("p", { text: t("loading") }));
  try {
    await render(view);
  } catch (error) {
    fill(view, errorBox(error));
  }
  view.querySelector("h2")?.focus();
}

document.getElementById("lang").addEventListener("click", () => {
  lang = lang === "zh" ? "en" : "zh";
  localStorage.setItem("kb-console-lang", lang);
  applyLanguage();
  renderRanking();
  route();
});
window.addEventListener("hashchange", () => {
  takeOperatorCredential();
  quiet();
  if (rankingState === null) showRanking();  // the credential may have just arrived
  route();
});
takeOperatorCredential();
applyLanguage();
showRanking();
route();
