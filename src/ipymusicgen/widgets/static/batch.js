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
    const stop = imsEl("button", "ims-batch-stop", "Stop");
    stop.type = "button";
    stop.title = "Start no more rows (the ones sent are still followed)";
    stop.setAttribute("aria-label", stop.title);
    stop.addEventListener("click", () => send({ kind: "stop" }));
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
  if (data.note) root.appendChild(imsEl("div", "ims-batch-note", data.note));
}

export default {
  render({ model, el }) {
    const root = imsEl("div", "ipymusicgen-batch");
    el.appendChild(root);
    const draw = () => imsBatchDraw(root, model.get("data") || {}, (message) => model.send(message));
    model.on("change:data", draw);
    draw();
    return () => model.off("change:data", draw);
  },
};
