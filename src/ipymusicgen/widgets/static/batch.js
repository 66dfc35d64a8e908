// Batch progress view: counts, a progress bar, credits, ETA and the rows (docs/frontend.md).
// Draws only what Python put in `data`; server and user text go through textContent (imsEl).

function imsBatchDraw(root, data, send) {
  root.replaceChildren();
  root.hidden = !data.name; // no batch yet: no empty table and no empty bar
  if (!data.name) return;
  const head = imsEl("div", "ims-batch-head");
  head.appendChild(imsEl("strong", "ims-batch-name", data.name || "batch"));
  head.appendChild(imsEl("span", "ims-batch-line", data.line || ""));
  if (data.can_stop) {
    const stop = imsTextButton("ims-batch-stop", "Stop", "Start no more rows (the ones sent are still followed)", () =>
      send({ kind: "stop" }), true);
    head.appendChild(stop);
  }
  root.appendChild(head);
  const total = Math.max(1, data.rows_total || 0);
  const bar = imsEl("div", "ims-batch-bar");
  bar.setAttribute("role", "progressbar");
  bar.setAttribute("aria-valuemin", "0");
  bar.setAttribute("aria-valuemax", String(total));
  const done = (data.counts && data.counts.complete) || 0;
  bar.setAttribute("aria-valuenow", String(done));
  for (const state of ["complete", "failed", "unknown", "skipped"]) {  // rows still running fill no part of it
    const n = (data.counts && data.counts[state]) || 0;
    if (!n) continue;
    const part = imsEl("span", "ims-batch-part ims-batch-" + state);
    part.style.width = (100 * n) / total + "%";
    part.title = n + " " + state;
    bar.appendChild(part);
  }
  root.appendChild(bar);
  const table = imsEl("table", "ims-batch-rows");
  const header = imsEl("tr");
  for (const name of ["row", "state", "request", "error"]) header.appendChild(imsEl("th", null, name));
  table.appendChild(header);
  for (const row of data.rows || []) {
    const tr = imsEl("tr", "ims-batch-row");
    tr.dataset.state = row.state;
    tr.appendChild(imsEl("td", null, row.index));
    tr.appendChild(imsEl("td", "ims-batch-state", row.state));
    tr.appendChild(imsEl("td", null, row.request));
    tr.appendChild(imsEl("td", "ims-batch-error", row.error || ""));
    table.appendChild(tr);
  }
  root.appendChild(table);
  if (data.more) root.appendChild(imsEl("div", "ims-batch-more", data.more));
  if (data.finished) {
    const end = imsEl("div", "ims-batch-finished", data.finished);
    end.dataset.failed = String(Boolean(data.can_retry));
    if (data.can_retry) {
      end.appendChild(
        imsTextButton("ims-batch-retry", "Retry failed rows", "Send the failed rows again, as a new batch", () =>
          send({ kind: "retry_failed" }),
        ),
      );
    }
    root.appendChild(end);
  }
  if (data.can_send || data.asking) {  // a batch planned, not sent yet: Send, or the question it asked
    const ask = imsEl("div", "ims-batch-ask");
    if (data.asking) {
      ask.appendChild(imsEl("span", "ims-batch-question", data.asking));
      ask.appendChild(imsTextButton("ims-batch-confirm ims-primary", "Confirm", "Send exactly what was priced", () =>
        send({ kind: "confirm" }),
      ));
      ask.appendChild(imsTextButton("ims-batch-cancel", "Cancel", "Send nothing", () => send({ kind: "cancel" })));
    } else {
      ask.appendChild(imsTextButton("ims-batch-send ims-primary", "Send", "Send these rows (asks first when paid)", () =>
        send({ kind: "send" }),
      ));
    }
    root.appendChild(ask);
  }
  if (data.note) root.appendChild(imsEl("div", "ims-batch-note", data.note));
}

// The data as patched, per model, shared by the model's views: `data` is synced whole only when its rows are new
// (or on "resync"); other updates are custom messages {kind: "patch", version, set, rows: [[index, row]]}.
const imsBatchStates = new WeakMap();

function imsBatchCopy(data) {
  const copy = { ...(data || {}) };
  copy.rows = [...(copy.rows || [])];
  return copy;
}

function imsBatchRows(data, message) {
  for (const [index, row] of message.rows || []) if (index < data.rows.length) data.rows[index] = row;
}

export default {
  render({ model, el }) {
    const root = imsEl("div", "ipymusicgen-batch");
    el.appendChild(root);
    const send = (message) => model.send(message);
    const draw = () => imsBatchDraw(root, imsPatchedData(imsBatchStates, model, imsBatchCopy), send);
    const synced = () => {
      imsBatchStates.set(model, imsBatchCopy(model.get("data"))); // whole data replaces whatever was patched
      draw();
    };
    const patched = imsPatchHandler(model, imsBatchStates, imsBatchCopy, imsBatchRows, send, draw);
    model.on("change:data", synced);
    model.on("msg:custom", patched);
    draw();
    return () => {
      model.off("change:data", synced);
      model.off("msg:custom", patched);
    };
  },
};
