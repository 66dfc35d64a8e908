// A prompt grid: rows × columns of compact song cards, each cell priced; Run (asks first when paid), pick two
// songs, "Compare blind". Python decides everything; this draws its plain data with textContent and sends intents.

// The board as patched, per model, shared by the model's views: `data` is synced whole only for a new shape (or on
// "resync"); each update after that is a custom message {kind: "patch", version, set, cells: [[row, column, cell]]}.
const imsGridBoards = new WeakMap();

function imsGridCopy(data) {
  const board = { ...(data || {}) };
  board.rows = (board.rows || []).map((row) => ({ ...row, cells: [...(row.cells || [])] }));
  return board;
}

function imsGridCells(board, message) {
  for (const [r, c, cell] of message.cells || []) {
    if (board.rows[r] && c < board.rows[r].cells.length) board.rows[r].cells[c] = cell;
  }
}

function imsGridView(root, model) {
  const send = imsCardSender(model); // card players read what Python chose: a URL, else the kernel's bytes
  const cards = new Map(); // id -> card element, kept across draws so a playing song keeps playing
  const head = imsEl("div", "ims-grid-head");
  const title = imsEl("div", "ims-grid-title");
  const total = imsEl("div", "ims-grid-total");
  const status = imsEl("div", "ims-grid-status");
  status.setAttribute("role", "status");
  head.append(title, total, status);
  const scroller = imsEl("div", "ims-grid-scroll");
  const table = imsEl("table", "ims-grid-table");
  scroller.appendChild(table);
  const controls = imsEl("div", "ims-grid-controls");
  const run = imsTextButton("ims-grid-run ims-primary", "Make the grid's songs", "Send every row of the grid as one batch", () => send({ kind: "run" }));
  const question = imsEl("span", "ims-grid-question");
  const confirm = imsTextButton("ims-grid-confirm ims-primary", "Confirm", "Send exactly what was priced", () => send({ kind: "confirm" }));
  const cancel = imsTextButton("ims-grid-cancel", "Cancel", "Send nothing", () => send({ kind: "cancel" }));
  const compare = imsTextButton("ims-grid-compare", "Compare blind", "Listen to the two picked songs as A and B, names hidden until you vote", () => send({ kind: "compare" }));
  const picks = imsEl("span", "ims-grid-picks");
  controls.append(run, question, confirm, cancel, compare, picks);
  const note = imsEl("div", "ims-grid-note");
  root.append(head, controls, scroller, note);
  let shape = "";

  const cardFor = (data) => {
    let card = cards.get(data.id);
    if (!card) {
      card = renderSongCard(document.createElement("div"), data, send);
      const pick = imsTextButton("ims-grid-pick", "Pick", "Pick this song for a blind comparison", () => send({ kind: "pick", id: card._ims.data.id }));
      card.querySelector(".ims-main").appendChild(pick);
      card._ims.pick = pick;
      cards.set(data.id, card);
    } else {
      updateSongCard(card, data, send);
    }
    const picked = Boolean(data.picked);
    card._ims.pick.setAttribute("aria-pressed", String(picked));
    card._ims.pick.textContent = picked ? "Picked to compare" : "Pick to compare";
    card.classList.toggle("ims-grid-picked", picked);
    return card;
  };

  const draw = (changed) => {
    let only = changed;
    const data = imsPatchedData(imsGridBoards, model, imsGridCopy);
    title.textContent = `Grid ${data.name || ""}`;
    total.textContent = data.total || "";
    status.textContent = data.status || "";
    const key = JSON.stringify([data.row_axis, data.column_axis, data.columns, (data.rows || []).map((r) => r.label)]);
    if (key !== shape) {
      shape = key;
      only = null; // a new table: every cell is drawn
      const thead = imsEl("thead");
      const top = imsEl("tr");
      const corner = imsEl("th", "ims-grid-corner", data.column_axis ? `${data.row_axis} \u2193 / ${data.column_axis} \u2192` : data.row_axis);
      corner.scope = "col";
      top.appendChild(corner);
      for (const column of data.columns || []) {
        const th = imsEl("th", null, column);
        th.scope = "col";
        top.appendChild(th);
      }
      thead.appendChild(top);
      const tbody = imsEl("tbody");
      for (const row of data.rows || []) {
        const tr = imsEl("tr");
        const th = imsEl("th", "ims-grid-label", row.label);
        th.scope = "row";
        tr.appendChild(th);
        for (let i = 0; i < row.cells.length; i++) tr.appendChild(imsEl("td", "ims-grid-cell"));
        tbody.appendChild(tr);
      }
      table.replaceChildren(thead, tbody);
    }
    const seen = new Set();
    const sources = [];
    for (const row of data.rows || []) for (const cell of row.cells) for (const song of cell.songs || []) {
      seen.add(song.id);
      sources.push(song.play_source);
    }
    send.kernelAudio.keep(sources); // blob: URLs of songs no longer on the board go
    const bodyRows = table.querySelectorAll("tbody tr");
    (data.rows || []).forEach((row, r) => {
      const tds = bodyRows[r].querySelectorAll("td");
      row.cells.forEach((cell, c) => {
        if (only && !only.has(`${r},${c}`)) return; // a patch redraws only the cells it changed
        const td = tds[c];
        td.dataset.state = cell.state;
        const meta = imsEl("div", "ims-grid-meta", `~${cell.estimate} credits (estimate) \u00b7 ${cell.state}`);
        const parts = [meta];
        if (cell.error) parts.push(imsEl("div", "ims-grid-error", cell.error));
        for (const song of cell.songs || []) parts.push(cardFor(song));
        td.replaceChildren(...parts);
      });
    });
    for (const [id, card] of cards) {
      if (!seen.has(id)) {
        disposeSongCard(card);
        cards.delete(id);
      }
    }
    const asking = Boolean(data.asking);
    run.hidden = asking; // one primary button at a time
    run.disabled = !data.can_run;
    run.classList.toggle("ims-primary", Boolean(data.can_run));
    question.textContent = data.asking || "";
    question.hidden = confirm.hidden = cancel.hidden = !asking;
    compare.disabled = !data.can_compare;
    compare.classList.toggle("ims-primary", Boolean(data.can_compare) && !asking && !data.can_run);
    const count = (data.picked || []).length;
    picks.textContent = count === 2 ? "2 songs picked" : `${count} of 2 songs picked`;
    note.textContent = data.note || "";
    note.hidden = !data.note;
  };
  const synced = () => {
    imsGridBoards.set(model, imsGridCopy(model.get("data"))); // a whole board: it replaces whatever was patched
    draw();
  };
  // a patch redraws only its cells (also when another view of this model applied it already)
  const drawCells = (message) => draw(new Set((message.cells || []).map(([r, c]) => `${r},${c}`)));
  const patched = imsPatchHandler(model, imsGridBoards, imsGridCopy, imsGridCells, send, drawCells);
  model.on("change:data", synced);
  model.on("msg:custom", patched);
  draw();
  const ticker = setInterval(() => tickSongCards(root), 1000);
  return () => {
    clearInterval(ticker);
    model.off("change:data", synced);
    model.off("msg:custom", patched);
    for (const card of cards.values()) disposeSongCard(card);
    send.release();
  };
}

/** The blind comparison the kernel opened (a child view), drawn under the grid; a new one replaces it. */
function imsGridComparison(model, host, box) {
  let shown = null;
  let controller = null;
  const draw = () => {
    const ref = model.get("comparison");
    if (ref === shown) return;
    shown = ref;
    if (controller) controller.abort();
    box.replaceChildren();
    if (!ref) return;
    controller = new AbortController();
    imsDrawChild(host, ref, box, controller.signal);
  };
  model.on("change:comparison", draw);
  draw();
  return () => {
    model.off("change:comparison", draw);
    if (controller) controller.abort();
  };
}

export default {
  render({ model, el, host }) {
    const root = imsEl("div", "ipymusicgen-grid");
    const comparison = imsEl("div", "ims-grid-comparison");
    el.append(root, comparison);
    const stopGrid = imsGridView(root, model);
    const stopComparison = imsGridComparison(model, host, comparison);
    return () => {
      stopGrid();
      stopComparison();
    };
  },
};
