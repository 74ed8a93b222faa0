// The Chaos panel (harness/webui/chaos.py, docs/webui.md).
//
// Loaded two ways: by /chaos/ (the standalone page: the panel fills it), and by one
// <script> tag the harness adds to Locust's own index page, where it mounts the panel
// above the table of Locust's "Chaos" tab whenever that tab is open (the table stays
// as Locust renders it). All state lives on the server: the panel polls
// chaos/api/state once a second and rebuilds its live parts; the forms keep their input.
(function () {
  "use strict";
  if (window.harnessChaosLoaded) return;  // one panel logic per page
  window.harnessChaosLoaded = true;

  // The page that loaded this script carries this Locust process's token; every call
  // that changes something sends it, as JSON, from this origin (harness/webui/guard.py).
  const script = document.currentScript || document.querySelector("script[data-chaos-token]");
  const TOKEN = (script && script.dataset.chaosToken) || "";
  const page = document.getElementById("harness-chaos-page");
  const base = page ? new URL("./", location.href) : new URL("./chaos/", document.baseURI);
  const url = (path) => new URL(path, base).toString();
  const POLL_MS = 1000;
  const MOUNT_MS = 400;

  const css = document.createElement("link");
  css.rel = "stylesheet";
  css.href = url("assets/chaos.css");
  document.head.appendChild(css);

  // h("tag", {attr: value, onclick: fn}, child...) — text children are never parsed as HTML.
  function h(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
      else if (key === "className") node.className = value;
      else node.setAttribute(key, value === true ? "" : String(value));
    }
    for (const child of children.flat()) {
      if (child === null || child === undefined || child === false) continue;
      node.appendChild(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  let lastState = null;
  let plansLoaded = null;

  async function call(method, path, body) {
    const options = { method, headers: { Accept: "application/json" }, credentials: "same-origin" };
    if (method !== "GET") {
      options.headers["Content-Type"] = "application/json";
      options.headers["X-Chaos-Token"] = TOKEN;
      options.body = JSON.stringify(body === undefined ? {} : body);
    }
    const response = await fetch(url(path), options);
    let data = null;
    try { data = await response.json(); } catch (error) { data = null; }
    if (!response.ok) {
      throw new Error((data && (data.detail || data.title)) || `${method} ${path}: HTTP ${response.status}`);
    }
    return data;
  }

  function root() { return document.getElementById("harness-chaos"); }

  function say(text) {
    const line = root() && root().querySelector(".chaos-message");
    if (line) line.textContent = text || "";
  }

  async function act(method, path, body) {
    say("");
    try {
      await call(method, path, body);
    } catch (error) {
      say(error.message);
    }
    await refresh(true);
  }

  // --- the panel ------------------------------------------------------------------------

  function build() {
    const form = h("form", { id: "chaos-add-toxic", onsubmit: (event) => {
      event.preventDefault();
      const data = new FormData(event.target);
      act("POST", "api/toxics", {
        proxy: data.get("proxy"), type: data.get("type"), stream: data.get("stream"),
        attributes: data.get("attributes") || "", toxicity: data.get("toxicity") || "1",
        name: data.get("name") || "",
      });
    } },
      h("select", { name: "proxy", "aria-label": "proxy" }),
      h("select", { name: "type", "aria-label": "toxic type", onchange: hintAttributes }),
      h("select", { name: "stream", "aria-label": "stream" },
        h("option", { value: "downstream" }, "downstream"), h("option", { value: "upstream" }, "upstream")),
      h("input", { name: "attributes", placeholder: "latency=800 jitter=100", size: 24, "aria-label": "attributes" }),
      h("input", { name: "toxicity", value: "1", size: 4, "aria-label": "toxicity" }),
      h("input", { name: "name", placeholder: "name (optional)", size: 14, "aria-label": "toxic name" }),
      h("button", { type: "submit", id: "chaos-add-toxic-button" }, "Add toxic"));

    const number = (value) => (value === null || value === "" ? null : Number(value));
    const arm = h("form", { id: "chaos-arm-crash-point", onsubmit: (event) => {
      event.preventDefault();
      const data = new FormData(event.target);
      act("POST", `api/crash-points/${encodeURIComponent(data.get("point"))}`, {
        action: data.get("action"), probability: number(data.get("probability")) ?? 1,
        count: number(data.get("count")), delay_ms: number(data.get("delay_ms")),
      });
    } },
      h("select", { name: "point", "aria-label": "crash point" }),
      h("select", { name: "action", "aria-label": "crash-point action" }),
      h("input", { name: "probability", value: "1", size: 4, "aria-label": "probability" }),
      h("input", { name: "count", placeholder: "count (optional)", size: 12, "aria-label": "count" }),
      h("input", { name: "delay_ms", placeholder: "delay ms (delay)", size: 12, "aria-label": "delay ms" }),
      h("button", { type: "submit", id: "chaos-arm-button" }, "Arm"), " ",
      h("button", { type: "button", id: "chaos-disarm-all", onclick: () => act("DELETE", "api/crash-points") },
        "Disarm all"));

    const planSelect = h("select", { id: "chaos-plan", "aria-label": "fault plan", onchange: loadPlan });
    return h("div", { id: "harness-chaos" },
      h("div", { className: "chaos-message", role: "status" }),
      h("section", { id: "chaos-head" },
        h("span", { id: "chaos-status" }, "loading…"), " ",
        h("button", { id: "chaos-heal", onclick: () => act("POST", "api/heal") }, "Heal everything"),
        h("button", { id: "chaos-check", onclick: () => act("POST", "api/check") }, "Check now")),
      h("section", {}, h("h3", {}, "Verdict"), h("div", { id: "chaos-verdict", className: "chaos-verdict" })),
      h("section", {}, h("h3", {}, "Active faults"), h("ul", { id: "chaos-faults" })),
      h("section", {}, h("h3", {}, "Proxies and toxics"), h("table", { id: "chaos-proxies" }), form),
      h("section", {}, h("h3", {}, "Fault plan"), planSelect, " ",
        h("button", { id: "chaos-plan-toxics", onclick: () => {
          if (planSelect.value) act("POST", `api/plans/${encodeURIComponent(planSelect.value)}/toxics`);
        } }, "Add the plan's toxics"),
        h("ul", { id: "chaos-plan-faults" })),
      h("section", {}, h("h3", {}, "Processes"), h("table", { id: "chaos-services" })),
      h("section", {}, h("h3", {}, "Crash points"), h("div", { id: "chaos-crash-points-error", className: "chaos-bad" }),
        h("table", { id: "chaos-crash-points" }), arm));
  }

  function hintAttributes() {
    const form = root() && root().querySelector("#chaos-add-toxic");
    if (!form || !lastState) return;
    const names = lastState.toxic_types[form.elements.type.value] || [];
    form.elements.attributes.placeholder = names.map((name) => `${name}=…`).join(" ") || "no attributes";
  }

  function fillSelect(select, values) {
    const current = Array.from(select.options).map((option) => option.value).join("\n");
    if (current === values.join("\n")) return;
    const chosen = select.value;
    select.replaceChildren(...values.map((value) => h("option", { value }, value)));
    if (values.includes(chosen)) select.value = chosen;
  }

  async function loadPlan() {
    const select = root() && root().querySelector("#chaos-plan");
    const list = root() && root().querySelector("#chaos-plan-faults");
    if (!select || !list) return;
    plansLoaded = select.value;
    if (!select.value) { list.replaceChildren(); return; }
    try {
      const faults = await call("GET", `api/plans/${encodeURIComponent(select.value)}`);
      list.replaceChildren(...faults.map((fault) => h("li", { "data-fault": fault.index },
        `${fault.kind}: ${fault.describe} `,
        h("button", { onclick: () => act("POST", `api/plans/${encodeURIComponent(select.value)}/faults/${fault.index}`) },
          "Apply"))));
    } catch (error) {
      say(error.message);
    }
  }

  function render(state) {
    const panel = root();
    if (!panel) return;
    lastState = state;
    const run = state.run || {};
    const stack = state.stack;
    panel.querySelector("#chaos-status").textContent =
      `${state.scenario} · test ${state.runner_state || "?"} · run ${run.id || "(next start)"}` +
      (stack ? ` · app ${stack.app_url}` : "") +
      ((stack && stack.unsafe_disable && stack.unsafe_disable.length) ? ` · UNSAFE ${stack.unsafe_disable.join(",")}` : "");
    if (state.error) say(state.error);
    else if (run.error) say(run.error);

    renderVerdict(panel.querySelector("#chaos-verdict"), state.verdict || {});

    const faults = panel.querySelector("#chaos-faults");
    faults.replaceChildren(...(state.faults.length ? state.faults.map((fault) =>
      h("li", { "data-kind": fault.kind, "data-target": fault.target }, `${fault.kind} ${fault.target}: ${fault.detail}`))
      : [h("li", { className: "chaos-muted" }, "none")]));

    const proxies = panel.querySelector("#chaos-proxies");
    proxies.replaceChildren(
      h("tr", {}, h("th", {}, "proxy"), h("th", {}, "listen → upstream"), h("th", {}, "toxics"), h("th", {}, "")),
      ...state.proxies.map((proxy) => h("tr", { "data-proxy": proxy.name },
        h("td", {}, proxy.name, proxy.enabled ? "" : h("span", { className: "chaos-bad" }, " (disabled)")),
        h("td", {}, `${proxy.listen} → ${proxy.upstream}`),
        h("td", {}, proxy.toxics.length ? h("ul", {}, proxy.toxics.map((toxic) =>
          h("li", { className: "chaos-toxic", "data-toxic": toxic.name },
            `${toxic.name}: ${toxic.type} ${toxic.stream} ` +
            Object.entries(toxic.attributes).map(([key, value]) => `${key}=${value}`).join(" ") +
            ` toxicity=${toxic.toxicity} `,
            h("button", { onclick: () => act("DELETE",
              `api/toxics/${encodeURIComponent(proxy.name)}/${encodeURIComponent(toxic.name)}`) }, "Remove"))))
          : h("span", { className: "chaos-muted" }, "none")),
        h("td", {}, proxy.enabled
          ? h("button", { onclick: () => act("POST", `api/proxies/${encodeURIComponent(proxy.name)}/disable`) }, "Disable")
          : h("button", { onclick: () => act("POST", `api/proxies/${encodeURIComponent(proxy.name)}/enable`) }, "Enable")))));

    const form = panel.querySelector("#chaos-add-toxic");
    fillSelect(form.elements.proxy, state.proxies.map((proxy) => proxy.name));
    const hadTypes = form.elements.type.options.length > 0;
    fillSelect(form.elements.type, Object.keys(state.toxic_types));
    if (!hadTypes) { form.elements.type.value = "latency"; hintAttributes(); }

    const planSelect = panel.querySelector("#chaos-plan");
    fillSelect(planSelect, ["", ...state.plans]);
    if (plansLoaded !== planSelect.value) loadPlan();

    renderCrashPoints(panel, state);

    const services = panel.querySelector("#chaos-services");
    services.replaceChildren(
      h("tr", {}, h("th", {}, "service"), h("th", {}, "status"), h("th", {}, "healthy"), h("th", {}, "")),
      ...state.services.map((service) => h("tr", { "data-service": service.name },
        h("td", {}, service.name), h("td", {}, service.status),
        h("td", {}, service.healthy ? "yes" : h("span", { className: "chaos-bad" }, "no")),
        h("td", {}, service.status === "external" ? "" : state.service_actions.map((action) =>
          h("button", { "data-action": action,
            onclick: () => act("POST", `api/services/${encodeURIComponent(service.name)}/${action}`) }, action))))));
  }

  function renderCrashPoints(panel, state) {
    const points = state.crash_points || [];
    panel.querySelector("#chaos-crash-points-error").textContent = state.crash_points_error || "";
    panel.querySelector("#chaos-crash-points").replaceChildren(
      h("tr", {}, h("th", {}, "crash point"), h("th", {}, "layer · process"), h("th", {}, "armed"),
        h("th", {}, "hits"), h("th", {}, "")),
      ...points.map((point) => h("tr", { "data-point": point.name, "data-armed": point.armed ? "yes" : "no" },
        h("td", { title: point.description }, point.name), h("td", {}, `${point.layer} · ${point.process}`),
        h("td", {}, point.armed ? h("span", { className: "chaos-bad" }, point.armed_describe) : "off"),
        h("td", {}, point.hits),
        h("td", {}, point.armed ? h("button", { "data-action": "disarm", onclick: () => act("DELETE",
          `api/crash-points/${encodeURIComponent(point.name)}`) }, "Disarm") : ""))));
    const form = panel.querySelector("#chaos-arm-crash-point");
    fillSelect(form.elements.point, points.map((point) => point.name));
    const chosen = points.find((point) => point.name === form.elements.point.value);
    fillSelect(form.elements.action, chosen ? chosen.actions : state.crash_point_actions || []);
  }

  function renderVerdict(box, verdict) {
    box.setAttribute("data-status", verdict.status || "idle");
    box.setAttribute("data-verdict", verdict.verdict || "");
    const words = {
      idle: "No run yet: the next test start begins one.",
      recording: `Recording run ${verdict.run_id}. Stop the test (or press Check now after it) for the verdict.`,
      checking: `Checking run ${verdict.run_id}: ${verdict.message || ""}`,
      error: `Harness failure: ${verdict.message || ""}`,
    };
    if (verdict.status !== "done") {
      box.replaceChildren(h("span", { className: "chaos-word" }, (verdict.status || "idle").toUpperCase()),
        words[verdict.status] || "");
      return;
    }
    const report = url(`runs/${encodeURIComponent(verdict.run_id)}/report.html`);
    box.replaceChildren(...[
      h("div", {}, h("span", { className: "chaos-word", id: "chaos-verdict-word" }, String(verdict.verdict).toUpperCase()),
        verdict.summary || "", " ",
        h("a", { id: "chaos-report", href: report, target: "_blank", rel: "noopener" }, "report.html")),
      (verdict.inconclusive_reasons || []).length
        ? h("div", {}, "inconclusive: " + verdict.inconclusive_reasons.join("; ")) : null,
      h("table", { id: "chaos-invariants" },
        h("tr", {}, h("th", {}, "invariant"), h("th", {}, "held"), h("th", {}, "violations")),
        ...(verdict.invariants || []).map((inv) => h("tr", { "data-invariant": inv.name, "data-passed": inv.passed },
          h("td", {}, inv.name), h("td", {}, inv.passed ? "yes" : h("span", { className: "chaos-bad" }, "NO")),
          h("td", {}, inv.violations))))].filter(Boolean));
  }

  async function refresh(fresh) {
    if (!root()) return;
    try {
      render(await call("GET", fresh ? "api/state?fresh=1" : "api/state"));
    } catch (error) {
      say(error.message);
    }
  }

  // --- mounting -------------------------------------------------------------------------

  // Inside Locust's page: the table of the Chaos tab has the header keys what/target/detail.
  function chaosTable() {
    const header = document.querySelector('th[data-sortkey="what"]');
    if (header) return header.closest("table");
    for (const th of document.querySelectorAll("th")) {
      if (th.textContent.trim() === "What" && th.nextElementSibling
          && th.nextElementSibling.textContent.trim() === "Target") return th.closest("table");
    }
    return null;
  }

  function mount() {
    if (root()) return;
    if (page) {
      page.appendChild(build());
    } else {
      if (new URLSearchParams(location.search).get("tab") !== "chaos" && !chaosTable()) return;
      const table = chaosTable();
      if (!table || !table.parentElement) return;
      // Inside the table's container: when Locust leaves the tab the container goes,
      // and the panel with it; the timer mounts a new one when the tab is back.
      table.parentElement.insertBefore(build(), table);
    }
    plansLoaded = null;
    refresh(true);
  }

  mount();
  setInterval(mount, MOUNT_MS);
  setInterval(() => refresh(false), POLL_MS);
})();
