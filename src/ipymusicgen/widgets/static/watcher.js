// ipymusicgen task watcher view (joined after common.js by widgets/_static.py).
// The kernel sends a snapshot of the visible page, then one numbered diff per polling round with only
// the fields that changed. A view that sees a gap in the numbers asks for a fresh snapshot.

function imsWatcherHeader(parts, header) {
  parts.title.textContent = header.title || "";
  parts.counts.textContent = header.counts || "";
  parts.error.textContent = header.error || "";
  parts.error.hidden = !header.error;
  parts.batch.textContent = header.batch || "";
  parts.batch.hidden = !header.batch;
  parts.pageLabel.textContent = header.page_label || "";
  parts.pager.hidden = !(header.pages > 1);
  parts.prev.disabled = !(header.page > 0);
  parts.next.disabled = !(header.page < header.pages - 1);
  parts.empty.hidden = header.total > 0;
  const failed = header.failed_calls || 0;
  parts.hideFailed.hidden = failed === 0;
  parts.hideFailed.textContent = header.hide_failed ? `Show failed (${failed})` : `Hide failed (${failed})`;
  parts.hideFailed.setAttribute("aria-pressed", header.hide_failed ? "true" : "false");
}

/** A call whose every take failed is one row: what, why, Retry (when its request is known) and Details. */
function imsCallFailed(group, send) {
  const datas = [...group._cards.values()].map((card) => card._ims.data);
  const failed = datas.length > 0 && datas.every((data) => data.state === "failed");
  group.classList.toggle("ims-call-failed", failed);
  let row = group._failedRow;
  if (!failed) {
    if (row) row.hidden = true;
    return;
  }
  if (!row) {
    row = imsEl("div", "ims-failed-row");
    row.setAttribute("role", "group");
    row.setAttribute("aria-label", "A failed call");
    const mark = imsEl("span", "ims-failed-mark", "Failed");
    const what = imsEl("span", "ims-failed-what");
    const why = imsEl("span", "ims-failed-why");
    const note = imsEl("span", "ims-failed-note");
    note.setAttribute("role", "status");
    const retry = imsTextButton("ims-failed-button ims-failed-retry", "Retry", "Send this request again (a new paid request)", () =>
      send({ kind: "retry", id: row._id }),
    );
    const details = imsTextButton("ims-failed-button ims-failed-details", "Details", "Show or hide this call's cards", () => {
      const open = group.classList.toggle("ims-call-open");
      details.setAttribute("aria-expanded", open ? "true" : "false");
    });
    details.setAttribute("aria-expanded", "false");
    row.append(mark, what, why, retry, details, note);
    row._parts = { what, why, note, retry };
    group.prepend(row);
    group._failedRow = row;
  }
  const first = datas[0];
  row.hidden = false;
  row._id = first.id;
  const chips = Array.isArray(first.style_chips) ? first.style_chips.join(", ") : "";
  row._parts.what.textContent = (first.title || chips || "Untitled") + (first.retried ? " · sent again" : "");
  row._parts.why.textContent = first.fail_reason || "no reason given";
  row._parts.note.textContent = datas.map((data) => data.note).find(Boolean) || "";
  row._parts.retry.hidden = !first.retryable;
}

export default {
  render({ model, el }) {
    const root = imsEl("div", "ipymusicgen-watcher");
    const head = imsEl("div", "ims-watcher-head");
    const title = imsEl("span", "ims-watcher-title");
    const counts = imsEl("span", "ims-watcher-counts");
    counts.setAttribute("role", "status");
    counts.setAttribute("aria-live", "polite");
    const pager = imsEl("div", "ims-pager");
    let header = { page: 0, pages: 1 };
    const prev = imsTextButton("ims-page-button", "‹", "Newer songs", () => model.send({ kind: "page", page: header.page - 1 }), true);
    const next = imsTextButton("ims-page-button", "›", "Older songs", () => model.send({ kind: "page", page: header.page + 1 }), true);
    const pageLabel = imsEl("span", "ims-page-label");
    pager.append(prev, pageLabel, next);
    const hideFailed = imsTextButton("ims-hide-failed", "Hide failed", "Leave failed calls out of the list (they stay counted)", () =>
      model.send({ kind: "hide_failed", on: !header.hide_failed }),
    );
    head.append(title, counts, hideFailed, pager);
    const batch = imsEl("div", "ims-watcher-batch");
    const error = imsEl("div", "ims-watcher-error");
    error.setAttribute("role", "alert");
    const empty = imsEl("div", "ims-watcher-empty", "Songs you start appear here.");
    const list = imsEl("div", "ims-watcher-list");
    root.append(head, batch, error, empty, list);
    el.appendChild(root);
    const parts = { title, counts, error, batch, pageLabel, pager, prev, next, empty, hideFailed };

    const send = imsCardSender(model); // its cards can ask the kernel for their audio
    const cards = new Map(); // task id -> card element (visible page only)
    let rev = null;

    function snapshot(message) {
      // Cards still on the page are kept (moved, not rebuilt): a song that is playing goes on playing.
      const previous = new Map(cards);
      cards.clear();
      const groups = message.groups.map((group) => {
        const element = imsEl("div", "ims-call");
        element._cards = new Map();
        element.dataset.call = (group[0] && group[0].call) || "";
        element.classList.toggle("ims-call-pair", group.length > 1);
        for (const data of group) {
          let card = previous.get(data.id);
          if (card) {
            previous.delete(data.id);
            updateSongCard(card, data, send);
            element.appendChild(card);
          } else {
            card = renderSongCard(element, data, send);
          }
          element._cards.set(data.id, card);
          cards.set(data.id, card);
        }
        imsCallFailed(element, send);
        return element;
      });
      for (const card of previous.values()) disposeSongCard(card);
      list.replaceChildren(...groups);
      header = message.header;
      imsWatcherHeader(parts, header);
    }

    function diff(message) {
      const now = Date.now();
      for (const [id, fields] of Object.entries(message.cards)) {
        const card = cards.get(id);
        if (!card) continue;
        const old = card._ims.data;
        const merged = { ...old, ...fields };
        if (!("elapsed_s" in fields) && old.elapsed_s !== null && old.elapsed_s !== undefined) {
          merged.elapsed_s = old.elapsed_s + (now - card._ims.receivedAt) / 1000;
        }
        updateSongCard(card, merged, send);
        if (card.parentElement && card.parentElement._cards) imsCallFailed(card.parentElement, send);
      }
      if (message.header) {
        header = message.header;
        imsWatcherHeader(parts, header);
      }
    }

    function onMessage(message) {
      if (!message || typeof message !== "object") return;
      if (message.kind === "snapshot") {
        rev = message.rev;
        snapshot(message);
      } else if (message.kind === "diff") {
        if (rev === null || message.rev !== rev + 1) {
          rev = null;
          model.send({ kind: "hello" }); // missed a message: start again from a snapshot
          return;
        }
        rev = message.rev;
        diff(message);
      }
    }

    model.on("msg:custom", onMessage);
    model.send({ kind: "hello" });
    const ticker = setInterval(() => tickSongCards(list), 1000);
    return () => {
      clearInterval(ticker);
      model.off("msg:custom", onMessage);
      disposeCards(list);
      send.release();
    };
  },
};
