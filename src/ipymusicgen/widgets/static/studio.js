// ipymusicgen studio: tabs, the request forms and the key panel (docs/frontend.md).
// Python decides everything (fields shown, required, problems, cost, confirm step, status words); this
// module draws the state it gets and sends intents back: input / touch / submit / confirm / cancel /
// tab / refresh_key / use_lyrics. Text goes in through textContent only. Joined after common.js.

/** The element for one field: label (human) + API name hint, input, count, problem. Built once. */
function studioField(formName, spec, send) {
  const row = imsEl("div", "ims-field" + (spec.wide ? " ims-field-wide" : ""));
  const id = `ims-${formName}-${spec.name}-${Math.random().toString(36).slice(2, 8)}`;
  const head = imsEl("div", "ims-field-head");
  const label = imsEl("label", "ims-label");
  label.htmlFor = id;
  const text = imsEl("span", "ims-label-text", spec.label);
  const star = imsEl("span", "ims-required", "*");
  star.title = "required for this action";
  star.setAttribute("aria-hidden", "true");
  label.append(text, star);
  const hint = imsEl("code", "ims-hint", spec.hint);
  hint.title = spec.description ? `${spec.hint}: ${spec.description}` : "the API's name for this field";
  const count = imsEl("span", "ims-count");
  head.append(label, hint, count);
  let input;
  if (spec.kind === "textarea") {
    input = imsEl("textarea", "ims-input");
    input.rows = spec.name === "lyrics" ? 7 : 2;
  } else if (spec.kind === "select") {
    input = imsSelect("ims-input");
  } else if (spec.kind === "toggle") {
    input = imsEl("div", "ims-toggle");
    input.setAttribute("role", "radiogroup");
    input.setAttribute("aria-label", spec.label);
  } else if (spec.kind === "checkbox") {
    input = imsEl("input", "ims-check");
    input.type = "checkbox";
  } else {
    input = imsEl("input", "ims-input");
    input.type = "text";
    if (spec.kind === "number") input.inputMode = "decimal";
  }
  input.id = id;
  if (spec.placeholder) input.placeholder = spec.placeholder;
  const problem = imsEl("div", "ims-problem");
  problem.id = id + "-problem";
  problem.setAttribute("role", "alert");
  if (input.setAttribute && spec.kind !== "toggle") input.setAttribute("aria-describedby", problem.id);

  const value = () => (spec.kind === "checkbox" ? input.checked : input.value);
  if (spec.kind === "toggle") {
    // radio-like buttons; the choice is sent at once and counts as touched
  } else if (spec.kind === "select" || spec.kind === "checkbox") {
    // a select's choices may be refreshed when it is opened (the Batch tab's notebook variables)
    if (spec.kind === "select") input.addEventListener("focus", () => send({ kind: "focus", form: formName, name: spec.name }));
    input.addEventListener("change", () => {
      send({ kind: "input", form: formName, name: spec.name, value: value() });
      send({ kind: "touch", form: formName, name: spec.name });
    });
  } else {
    let timer = null;
    input.addEventListener("input", () => {
      clearTimeout(timer);
      timer = setTimeout(() => send({ kind: "input", form: formName, name: spec.name, value: value() }), 120);
    });
    input.addEventListener("blur", () => {
      clearTimeout(timer);
      send({ kind: "input", form: formName, name: spec.name, value: value() });
      send({ kind: "touch", form: formName, name: spec.name });
    });
  }
  if (spec.kind === "checkbox") {
    const line = imsEl("div", "ims-check-line");
    line.append(input, label, hint, count);
    row.append(line, problem);
  } else {
    row.append(head, input, problem);
  }
  return { row, input, count, problem, star, spec, optionsKey: "" };
}

/** Bring a field's element in line with its state (without touching what the person is typing). */
function studioUpdateField(formName, field, data, send) {
  field.row.hidden = !data.shown;
  field.star.hidden = !data.required;
  field.row.classList.toggle("ims-is-required", !!data.required);
  const input = field.input;
  if (data.kind === "select") {
    imsOptions(input, data.options, data.value);
  } else if (data.kind === "toggle") {
    const key = JSON.stringify(data.options);
    if (key !== field.optionsKey) {
      field.optionsKey = key;
      input.replaceChildren(
        ...data.options.map(([label, value]) => {
          const button = imsTextButton("ims-toggle-option", label, "", () => {
            send({ kind: "input", form: formName, name: data.name, value: String(value) });
            send({ kind: "touch", form: formName, name: data.name });
          });
          button.dataset.value = String(value);
          button.setAttribute("role", "radio");
          return button;
        })
      );
    }
    for (const button of input.children) {
      const on = button.dataset.value === String(data.value);
      button.classList.toggle("ims-on", on);
      button.setAttribute("aria-checked", on ? "true" : "false");
    }
  } else if (data.kind === "checkbox") {
    input.checked = !!data.value;
  } else if (document.activeElement !== input) {
    if (input.value !== String(data.value)) input.value = String(data.value);
  }
  if (input.disabled !== undefined) input.disabled = !!data.disabled;
  field.count.textContent = data.count || "";
  field.count.classList.toggle("ims-over", !!data.count_over);
  field.problem.textContent = data.problem || "";
  field.row.classList.toggle("ims-has-problem", !!data.problem);
  if (input.setAttribute) input.setAttribute("aria-invalid", data.problem ? "true" : "false");
  if (data.required && input.setAttribute) input.setAttribute("aria-required", "true");
}

/** One form pane (song / v2 / lyrics): fields built once from the first state, then updated. */
function studioForm(formName, state, send, extras) {
  const root = imsEl("form", "ims-form");
  root.setAttribute("novalidate", "");
  root.addEventListener("submit", (event) => event.preventDefault());
  const grid = imsEl("div", "ims-fields");
  const fields = {};
  for (const spec of state.fields) {
    fields[spec.name] = studioField(formName, spec, send);
    grid.appendChild(fields[spec.name].row);
  }
  const errorBox = imsEl("div", "ims-error");
  errorBox.setAttribute("role", "alert");
  const errorTitle = imsEl("strong", "ims-error-title");
  const errorText = imsEl("div", "ims-error-text");
  const dismiss = imsTextButton("ims-button ims-error-dismiss", "Dismiss", "", () => send({ kind: "dismiss", form: formName }));
  dismiss.setAttribute("aria-label", "Dismiss this error");
  errorBox.append(errorTitle, errorText, dismiss);

  const actions = imsEl("div", "ims-submit-row");
  const submit = imsTextButton("ims-button ims-primary", state.submit_label, "", () => {
    const focused = document.activeElement;
    if (focused && root.contains(focused) && focused.name !== undefined) focused.blur();
    send({ kind: "submit", form: formName });
  });
  submit.setAttribute("aria-label", state.submit_label);
  const cost = imsEl("span", "ims-cost");
  const status = imsEl("span", "ims-status");
  status.setAttribute("role", "status");
  status.setAttribute("aria-live", "polite");
  const idsButton = imsTextButton("ims-button ims-link", "ids", "", () => {
    ids.hidden = !ids.hidden;
    idsButton.setAttribute("aria-expanded", ids.hidden ? "false" : "true");
  });
  idsButton.title = "show the ids of the songs just started";
  idsButton.setAttribute("aria-label", "Show the ids of the songs just started");
  const ids = imsEl("code", "ims-ids");
  ids.hidden = true;
  actions.append(submit, cost, status, idsButton);

  const confirm = imsEl("div", "ims-confirm");
  confirm.setAttribute("role", "alertdialog");
  const confirmText = imsEl("span", "ims-confirm-text");
  const yes = imsTextButton("ims-button ims-primary ims-confirm-yes", "Confirm and send", "", () =>
    send({ kind: "confirm", form: formName })
  );
  const no = imsTextButton("ims-button ims-confirm-no", "Cancel", "", () => send({ kind: "cancel", form: formName }));
  confirm.append(confirmText, yes, no);

  root.append(grid, actions, ids, confirm, errorBox);
  const extra = extras ? extras(root) : null;

  function update(data) {
    for (const item of data.fields) {
      if (!fields[item.name]) continue;
      studioUpdateField(formName, fields[item.name], item, send);
    }
    submit.textContent = data.busy ? "Sending…" : data.submit_label;
    submit.disabled = !data.can_submit;
    // one primary button at a time: while the confirm step asks, its "Confirm and send" is the one
    submit.hidden = !!data.confirm;
    cost.textContent = data.cost || "";
    status.textContent = data.status || "";
    idsButton.hidden = !(data.ids && data.ids.length);
    ids.textContent = (data.ids || []).join("  ");
    if (idsButton.hidden) ids.hidden = true;
    confirm.hidden = !data.confirm;
    confirmText.textContent = data.confirm || "";
    errorBox.hidden = !(data.error || data.error_title);
    errorTitle.textContent = data.error_title || "";
    errorText.textContent = data.error || "";
    dismiss.hidden = !data.error; // a server's error; field problems go when the field is mended
    if (extra) extra(data);
  }
  update(state);
  return { root, update, confirmButton: yes };
}

/** The Key tab: status in words, credits (with the API's term), the one key mask. */
function studioKey(send) {
  const root = imsEl("div", "ims-key");
  const status = imsEl("p", "ims-key-status");
  status.setAttribute("role", "status");
  const credits = imsEl("div", "ims-key-credits");
  const number = imsEl("span", "ims-key-number");
  const word = imsEl("span", "ims-key-word", "credits left");
  const hint = imsEl("code", "ims-hint");
  credits.append(number, word, hint);
  const table = imsEl("table", "ims-key-table");
  const error = imsEl("div", "ims-error");
  error.setAttribute("role", "alert");
  const refresh = imsTextButton("ims-button", "Check again", "", () => send({ kind: "refresh_key" }));
  refresh.setAttribute("aria-label", "Check the key and its credits again");
  root.append(status, credits, table, refresh, error);

  function update(data) {
    status.textContent = data.status || "";
    status.classList.toggle("ims-ok", !!data.ok);
    number.textContent = data.credits || "—";
    hint.textContent = data.credits_hint || "";
    hint.title = "the service's name for credits";
    const rows = [["Service", data.service, ""], ["Key", data.mask, ""], ...(data.rows || [])];
    if (data.confirm) rows.push(["Paid requests", "are confirmed before they are sent", ""]);
    table.replaceChildren();
    for (const [name, value, apiName] of rows) {
      const row = imsEl("tr");
      const term = imsEl("th", "", name);
      term.scope = "row";
      if (apiName) {
        const code = imsEl("code", "ims-hint", apiName);
        code.title = "the API's name";
        term.append(" ", code);
      }
      row.append(term, imsEl("td", "", value));
      table.append(row);
    }
    error.hidden = !data.error;
    error.textContent = data.error || "";
  }
  return { root, update };
}

/** A child view (the Batch tab's progress, the Library) drawn inside a tab, once, when the tab is first shown. */
function studioChild(model, host, trait, box) {
  let drawn = false;
  return () => {
    const ref = model.get(trait);
    if (drawn || !ref) return;
    drawn = true;
    imsDrawChild(host, ref, box);
  };
}

function studioRender({ model, el, host }) {
  const send = (message) => model.send(message);
  const root = imsEl("div", "ipymusicgen-studio ims-studio");
  // keys typed in the studio are the studio's (arrows in the tab bar, Enter on a button), not notebook shortcuts
  root.setAttribute("data-lm-suppress-shortcuts", "true");
  const bar = imsEl("div", "ims-tabs");
  bar.setAttribute("role", "tablist");
  bar.setAttribute("aria-label", "Studio");
  const body = imsEl("div", "ims-tab-body");
  root.append(bar, body);
  el.appendChild(root);

  const panels = {};
  const tabButtons = {};
  const forms = {};
  const children = {};
  const panes = model.get("panes");

  const lyricsExtra = (formRoot) => {
    const box = imsEl("div", "ims-lyrics-result");
    const title = imsEl("strong", "ims-lyrics-title");
    const text = imsEl("pre", "ims-lyrics-text");
    const use = imsTextButton("ims-button", "Use in a song", "", () => send({ kind: "use_lyrics" }));
    use.setAttribute("aria-label", "Use these lyrics in the Song tab");
    box.append(title, text, use);
    formRoot.appendChild(box);
    return (data) => {
      box.hidden = !data.lyrics;
      title.textContent = data.lyrics ? data.lyrics.title : "";
      text.textContent = data.lyrics ? data.lyrics.text : "";
    };
  };

  for (const tab of model.get("tabs")) {
    const button = imsTextButton("ims-tab", tab.title, tab.hint, () => send({ kind: "tab", tab: tab.id }));
    button.setAttribute("role", "tab");
    button.dataset.tab = tab.id;
    tabButtons[tab.id] = button;
    bar.appendChild(button);
    const panel = imsEl("div", "ims-panel");
    panel.setAttribute("role", "tabpanel");
    panel.dataset.tab = tab.id;
    panels[tab.id] = panel;
    body.appendChild(panel);
    if (tab.blurb) panel.appendChild(imsEl("p", "ims-muted ims-blurb", tab.blurb));
    if (panes[tab.id]) {
      forms[tab.id] = studioForm(tab.id, panes[tab.id], send, tab.id === "lyrics" ? lyricsExtra : null);
      panel.appendChild(forms[tab.id].root);
    } else if (tab.id === "key") {
      forms.key = studioKey(send);
      panel.appendChild(forms.key.root);
    }
    const trait = { batch: "batch_view", library: "library_view" }[tab.id];
    if (trait) {
      const box = imsEl("div", "ims-child ims-child-" + tab.id);
      panel.appendChild(box);
      children[tab.id] = { box, draw: studioChild(model, host, trait, box) };
    }
  }
  // arrow keys move between tabs, as in any tablist. Listened for on the window (capture) because
  // Notebook 7 stops arrow keys on their way down to the page; only keys aimed at this tab bar are taken.
  const onKey = (event) => {
    if (!bar.contains(event.target) || (event.key !== "ArrowRight" && event.key !== "ArrowLeft")) return;
    const ids = Object.keys(tabButtons);
    const at = ids.indexOf(model.get("tab"));
    const next = ids[(at + (event.key === "ArrowRight" ? 1 : ids.length - 1)) % ids.length];
    event.preventDefault();
    event.stopPropagation();
    send({ kind: "tab", tab: next });
    tabButtons[next].focus();
  };
  window.addEventListener("keydown", onKey, true);

  const showTab = () => {
    const current = model.get("tab");
    for (const [id, button] of Object.entries(tabButtons)) {
      const on = id === current;
      button.classList.toggle("ims-on", on);
      button.setAttribute("aria-selected", on ? "true" : "false");
      button.tabIndex = on ? 0 : -1;
      panels[id].hidden = !on;
    }
    if (children[current]) children[current].draw();
  };
  const showPanes = () => {
    const all = model.get("panes");
    for (const [id, state] of Object.entries(all)) if (forms[id]) forms[id].update(state);
    if (children.batch) children.batch.box.hidden = !(all.batch && all.batch.has_batch);
  };
  const showKey = () => forms.key && forms.key.update(model.get("key"));
  showTab();
  showPanes();
  showKey();
  model.on("change:tab", showTab);
  model.on("change:panes", showPanes);
  model.on("change:key", showKey);
  send({ kind: "ready" });
  return () => {
    window.removeEventListener("keydown", onKey, true);
    model.off("change:tab", showTab);
    model.off("change:panes", showPanes);
    model.off("change:key", showKey);
  };
}

export default { render: studioRender };
