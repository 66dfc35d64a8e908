// ipymusicgen library view (joined after common.js by widgets/_static.py).
// Python sends the page of song cards, the filter choices, a lineage (when one is shown) and the spend
// per day; this file draws them with the shared song card and sends intents back. No HTML from data.
// A card's WAV / MP4 are sent as intents; Python asks first (the PaidAsk rule) and pays at most once.
// Where a card's player reads (a URL, or the kernel's bytes by an opaque name) Python decided: no URL is made here.

export default {
  render({ model, el }) {
    const send = imsCardSender(model);
    const anyOf = (text, values) => [[text, ""], ...values.map((value) => [value, value])];
    const root = imsEl("div", "ipymusicgen-library");
    const bar = imsEl("div", "ims-library-bar");
    const search = imsEl("input", "ims-library-search");
    search.type = "search";
    search.placeholder = "Search title, style, lyrics, prompt";
    search.setAttribute("aria-label", "Search songs");
    let timer = null;
    search.addEventListener("input", () => {
      clearTimeout(timer);
      timer = setTimeout(() => send({ kind: "search", text: search.value }), 250);
    });
    const filter = (key, value) => send({ kind: "filter", filters: { [key]: value } });
    const state = imsSelect("ims-library-select", "State", (v) => filter("state", v));
    imsOptions(state, anyOf("Any state", ["ready", "failed", "preview", "writing"]), "");
    const modelSelect = imsSelect("ims-library-select", "Model", (v) => filter("model", v));
    const batchSelect = imsSelect("ims-library-select", "Batch", (v) => filter("batch", v));
    const favLabel = imsEl("label", "ims-library-fav");
    const fav = imsEl("input");
    fav.type = "checkbox";
    fav.addEventListener("change", () => filter("favourite", fav.checked));
    favLabel.append(fav, imsEl("span", null, "Favourites"));
    const refresh = imsTextButton("ims-page-button", "↻", "Refresh", () => send({ kind: "refresh" }), true);
    bar.append(search, state, modelSelect, batchSelect, favLabel, refresh);

    const status = imsEl("div", "ims-library-status");
    status.setAttribute("role", "status");
    status.setAttribute("aria-live", "polite");
    const lineage = imsEl("div", "ims-library-lineage");
    const grid = imsEl("div", "ims-library-grid");
    const pager = imsEl("div", "ims-pager");
    const prev = imsTextButton("ims-page-button", "‹", "Newer songs", () => send({ kind: "page", page: model.get("page") - 1 }), true);
    const next = imsTextButton("ims-page-button", "›", "Older songs", () => send({ kind: "page", page: model.get("page") + 1 }), true);
    const pageLabel = imsEl("span", "ims-page-label");
    pager.append(prev, pageLabel, next);
    const spend = imsEl("div", "ims-library-spend");
    root.append(bar, status, lineage, grid, pager, spend);
    el.appendChild(root);

    const drawFilters = () => {
      const f = model.get("filters") || {};
      if (document.activeElement !== search) search.value = model.get("text") || "";
      state.value = f.state || "";
      fav.checked = Boolean(f.favourite);
      imsOptions(modelSelect, anyOf("Any model", model.get("models") || []), f.model);
      imsOptions(batchSelect, anyOf("Any batch", model.get("batches") || []), f.batch);
      batchSelect.hidden = !(model.get("batches") || []).length;
    };

    const drawCards = () => {
      disposeCards(grid);
      grid.replaceChildren();
      const groups = new Map();
      for (const data of model.get("cards") || []) {
        const key = data.call || data.id;
        if (!groups.has(key)) groups.set(key, []);
        groups.get(key).push(data);
      }
      send.kernelAudio.keep([...groups.values()].flat().map((c) => c.play_source)); // others' blob: URLs go
      for (const cards of groups.values()) {
        const group = renderCallGroup(grid, cards, send);
        for (const card of group.querySelectorAll(".ipymusicgen-song")) {
          const data = cards.find((c) => c.id === card.dataset.id);
          if (!data) continue;
          const extra = imsEl("div", "ims-library-extra");
          if (cards.length > 1 && data.state === "ready") {
            const keep = imsTextButton("ims-library-keep", data.kept ? "Kept" : "Keep", data.kept ? "This take is kept" : "Keep this take", () => send({ kind: "keep", id: data.id }), true);
            keep.setAttribute("aria-pressed", String(Boolean(data.kept)));
            extra.appendChild(keep);
          }
          if (data.has_lineage) extra.appendChild(imsTextButton("ims-library-link", "Lineage", "Show the songs this one was extended or joined from", () => send({ kind: "lineage", id: data.id }), true));
          if (data.note) extra.appendChild(imsEl("span", "ims-library-note", data.note));
          // the analysis: the WAV's lossy-source verdict, asked against measured (Python's words, as text)
          const labLines = (data.lab_lines || []).filter((line) => line && typeof line.text === "string");
          if (labLines.length) {
            const lab = imsEl("div", "ims-library-lab");
            for (const line of labLines) {
              const row = imsEl("span", line.kind === "lossy" ? "ims-lab-line ims-lab-lossy" : "ims-lab-line ims-lab-adherence", line.text);
              if (line.met === false) row.classList.add("ims-lab-missed");
              lab.appendChild(row);
            }
            extra.appendChild(lab);
          }
          for (const kind of data.extras_made || []) {
            // made before (here, in another kernel or by an agent): a press reuses it, nothing is asked or paid
            const button = card.querySelector(`.ims-actions button[data-action="${kind}"]`);
            if (!button) continue;
            const label = `${IMS_ACTION_WORDS[kind] || kind} made before: reused, nothing to pay`;
            button.title = label;
            button.setAttribute("aria-label", label);
            button.dataset.made = "true";
            const word = button.querySelector(".ims-button-word");
            if (word) word.textContent = `${IMS_ACTION_WORDS[kind] || kind} (made)`;
          }
          card.classList.toggle("ims-kept", Boolean(data.kept));
          card.classList.toggle("ims-archive-failed", Boolean(data.archive_failed));
          card.querySelector(".ims-main").appendChild(extra);
        }
      }
    };

    const drawLineage = () => {
      const rows = model.get("lineage") || [];
      lineage.hidden = !rows.length;
      if (!rows.length) return lineage.replaceChildren();
      const list = imsEl("ol", "ims-lineage-list");
      for (const row of rows) {
        const item = imsEl("li", row.current ? "ims-lineage-current" : null, `${row.action || "song"}: ${row.title || "Untitled"}`);
        item.style.paddingLeft = `${Math.min(row.depth, 8) * 1.2}em`;
        list.appendChild(item);
      }
      lineage.replaceChildren(imsEl("strong", null, "Lineage"), list, imsTextButton("ims-page-button", "All songs", "Back to all songs", () => send({ kind: "lineage", id: "" }), true));
    };

    const drawPager = () => {
      const pages = Math.max(1, Math.ceil(model.get("total") / model.get("page_size")));
      const page = model.get("page");
      pager.hidden = pages <= 1 || (model.get("lineage") || []).length > 0;
      prev.disabled = page <= 0;
      next.disabled = page >= pages - 1;
      pageLabel.textContent = `Page ${page + 1} of ${pages}`;
    };

    const drawSpend = () => {
      const rows = model.get("spend_days") || [];
      const total = model.get("spend_total") || {};
      const most = Math.max(1, ...rows.map((r) => r.credits_estimated || 0));
      const chart = imsEl("div", "ims-spend-chart");
      chart.setAttribute("role", "img");
      chart.setAttribute(
        "aria-label",
        `Credits spent per day (estimate): ${rows.map((r) => `${r.day}: about ${r.credits_estimated || 0}`).join("; ")}`,
      );
      for (const row of rows) {
        const column = imsEl("div", "ims-spend-day");
        const fill = imsEl("div", "ims-spend-bar");
        fill.style.height = `${Math.round((100 * (row.credits_estimated || 0)) / most)}%`;
        const measured = row.credits_measured === null || row.credits_measured === undefined ? "" : `, ${row.credits_measured} measured`;
        column.title = `${row.day}: ${row.calls} call(s), ${row.songs} song(s), about ${row.credits_estimated} credits (estimate)${measured}`;
        const value = imsEl("span", "ims-spend-value", `~${row.credits_estimated || 0}`);
        column.append(value, fill, imsEl("span", "ims-spend-label", String(row.day).slice(5)));
        chart.appendChild(column);
      }
      const axis = imsEl("div", "ims-spend-axis", `Credits per day (estimate; tallest bar ~${most})`);
      const days = imsEl("div", "ims-spend-axis", "Day (month-day)");
      const measured = total.credits_measured === null || total.credits_measured === undefined ? "" : `; ${total.credits_measured} measured on the key`;
      const line = `Spent: ${total.calls || 0} call(s), ${total.songs || 0} song(s), about ${total.credits_estimated || 0} credits (estimate)${measured}`;
      spend.replaceChildren(imsEl("div", "ims-spend-total", line), axis, chart, days);
      spend.hidden = !rows.length && !total.calls;
    };

    const drawAll = () => {
      drawFilters();
      status.textContent = model.get("status") || "";
      drawLineage();
      drawCards();
      drawPager();
      drawSpend();
    };
    drawAll();
    const onChange = () => drawAll();
    model.on("change", onChange);
    const ticker = setInterval(() => tickSongCards(grid), 1000);
    return () => {
      clearInterval(ticker);
      clearTimeout(timer);
      model.off("change", onChange);
      disposeCards(grid);
      send.release();
    };
  },
};
