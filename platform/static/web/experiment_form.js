// The experiment form's live batch-plan preview and tab switch.
//
// On any change (debounced 300 ms) the whole form - either tab - is POSTed (with its CSRF token)
// to the plan-preview endpoint, which validates it with the trainer's schema and answers
//   {"ok": true, "plan": {...figures}, "text": "..."}  or  {"ok": false, "errors": {dotted: message}}.
// Figures fill #plan-preview; errors go next to their field ([data-error-for="dotted.path"]), or to
// the YAML tab's list, or to the form-wide list. Switching tabs asks the same endpoint (sync=1) to
// turn the form into YAML or the YAML into form values, so edits carry over.
// The fields outside the basic view sit in collapsed <details> groups: a group opens when an error
// lands in it or when a tab switch changes one of its values (collapsed fields are still submitted).
(function () {
  "use strict";
  const form = document.getElementById("experiment-form");
  if (!form) return;
  const previewUrl = form.dataset.previewUrl;
  const panel = document.getElementById("plan-preview");
  const statusEl = document.getElementById("plan-status");
  const planText = document.getElementById("plan-text");
  const planErrors = document.getElementById("plan-errors");
  const formErrors = document.getElementById("form-errors");
  const yamlErrors = document.getElementById("yaml-errors");
  const tabNote = document.getElementById("tab-note");
  const DEBOUNCE_MS = 300;
  let timer = null;
  let inflight = null;
  let sequence = 0;
  let switching = false;  // a tab switch is in flight: it shows the plan itself, so no preview meanwhile
  let mode = (form.querySelector("input[name=mode]:checked") || {}).value || "form";

  function csrfToken() {
    const input = form.querySelector("input[name=csrfmiddlewaretoken]");
    return input ? input.value : "";
  }

  async function post(overrides) {
    const data = new FormData(form);
    data.set("mode", mode);
    for (const [k, v] of Object.entries(overrides || {})) data.set(k, v);
    if (inflight) inflight.abort();
    inflight = new AbortController();
    const response = await fetch(previewUrl, {
      method: "POST", body: data, signal: inflight.signal, credentials: "same-origin",
      headers: {"X-CSRFToken": csrfToken(), "Accept": "application/json"},
    });
    const type = response.headers.get("content-type") || "";
    if (!type.includes("application/json")) throw new Error(`preview answered ${response.status}`);
    return response.json();
  }

  function li(text, code) {
    const item = document.createElement("li");
    if (code) {
      const c = document.createElement("code");
      c.textContent = code;
      item.append(c, ": ");
    }
    item.append(text);
    return item;
  }

  function clearErrors() {
    form.querySelectorAll("[data-error-for]").forEach((ul) => { ul.replaceChildren(); });
    form.querySelectorAll(".field.has-error").forEach((f) => f.classList.remove("has-error"));
    formErrors.replaceChildren();
    planErrors.replaceChildren();
  }

  // "rewards[1].weight" -> the rewards field; "env.settings.low" (a key inside a JSON-object field)
  // -> the env.settings field; "batch.nonsense" -> none (form-wide).
  function errorList(key) {
    const path = key.split("[")[0];
    const candidates = [key, path];
    for (let cut = path.lastIndexOf("."); cut > 0; cut = path.lastIndexOf(".", cut - 1)) {
      candidates.push(path.slice(0, cut));
    }
    for (const k of candidates) {
      const el = form.querySelector(`[data-error-for="${CSS.escape(k)}"]`);
      if (el && el !== yamlErrors) return [el, k === key];
    }
    return [null, false];
  }

  function openGroupOf(element) {
    const group = element && element.closest("details.group");
    if (group) group.open = true;
  }

  function showErrors(errors) {
    for (const [key, message] of Object.entries(errors || {})) {
      planErrors.append(li(message, key));
      if (mode === "yaml") {
        yamlErrors.append(li(message, key));
        continue;
      }
      const [list, exact] = errorList(key);
      if (list) {
        list.append(exact ? li(message) : li(message, key));
        const field = list.closest(".field");
        if (field) field.classList.add("has-error");
        openGroupOf(list);
      } else {
        formErrors.append(li(message, key));
      }
    }
  }

  function showPlan(result) {
    clearErrors();
    if (result.ok) {
      panel.dataset.state = "ok";
      statusEl.textContent = "valid";
      for (const cell of panel.querySelectorAll("[data-plan]")) {
        const value = result.plan[cell.dataset.plan];
        cell.textContent = value === null || value === undefined ? "-" : String(value);
      }
      planText.textContent = result.text;
    } else {
      panel.dataset.state = "error";
      statusEl.textContent = "invalid config";
      planText.textContent = "";
      for (const cell of panel.querySelectorAll("[data-plan]")) cell.textContent = "";
      showErrors(result.errors);
    }
  }

  async function refresh() {
    if (switching) return;
    const mine = ++sequence;
    panel.dataset.state = "loading";
    try {
      const result = await post();
      if (mine === sequence) showPlan(result);
    } catch (err) {
      if (err.name === "AbortError") return;
      if (mine === sequence) {
        panel.dataset.state = "error";
        statusEl.textContent = "preview unavailable (" + err.message + ")";
      }
    }
  }

  function schedule() {
    clearTimeout(timer);
    if (!switching) timer = setTimeout(refresh, DEBOUNCE_MS);
  }

  function setValues(values) {
    for (const [name, value] of Object.entries(values)) {
      const input = form.elements.namedItem(name);
      if (!input) continue;
      if (input.type === "checkbox") {
        if (input.checked !== Boolean(value)) openGroupOf(input);
        input.checked = Boolean(value);
        continue;
      }
      // A select keeps a value it does not list (e.g. a model.path typed in YAML) as an extra
      // option, so that switching tabs never changes the config.
      if (input.tagName === "SELECT" && value !== "" && ![...input.options].some((o) => o.value === String(value))) {
        input.add(new Option(String(value), String(value)));
      }
      if (input.value !== String(value)) openGroupOf(input);
      input.value = value;
    }
  }

  async function switchTab(event) {
    const target = event.target.value;
    if (target === mode) return;
    tabNote.textContent = "";
    const from = mode;
    // Leaving the YAML box fires its "change": that preview must not abort (and so silently drop)
    // the switch's own request, which answers with the plan too.
    clearTimeout(timer);
    switching = true;
    try {
      const result = await post({mode: from, sync: "1"});
      if (from === "form" && typeof result.yaml === "string") {
        document.getElementById("id_config_yaml").value = result.yaml;
      } else if (from === "yaml") {
        if (!result.values) {
          // The YAML cannot be read: stay on it and say why.
          document.getElementById("mode-yaml").checked = true;
          showPlan(result);
          tabNote.textContent = "Fix the YAML before switching to the form.";
          return;
        }
        setValues(result.values);
      }
      mode = target;
      form.classList.toggle("mode-yaml", mode === "yaml");
      form.classList.toggle("mode-form", mode === "form");
      showPlan(result);
    } catch (err) {
      if (err.name === "AbortError") return;
      document.getElementById("mode-" + from).checked = true;
      tabNote.textContent = "Could not switch: " + err.message;
    } finally {
      switching = false;
    }
  }

  function setGroups(open) {
    form.querySelectorAll("details.group").forEach((group) => { group.open = open; });
  }
  const openAll = document.getElementById("groups-open");
  const closeAll = document.getElementById("groups-close");
  if (openAll) openAll.addEventListener("click", () => setGroups(true));
  if (closeAll) closeAll.addEventListener("click", () => setGroups(false));

  form.querySelectorAll("input[name=mode]").forEach((radio) => radio.addEventListener("change", switchTab));
  form.addEventListener("input", (event) => { if (event.target.name !== "mode") schedule(); });
  form.addEventListener("change", (event) => { if (event.target.name !== "mode") schedule(); });
  // Submitting saves what the visible tab shows.
  form.addEventListener("submit", () => {
    const radio = document.getElementById("mode-" + mode);
    if (radio) radio.checked = true;
  });
  window.planPreview = {refresh};  // for tests and the console
})();
