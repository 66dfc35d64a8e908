// Blind comparison: one shared player for A, B (and X), waveforms to seek and loop, keys, and the vote.
// Python decides what is shown: before the vote only labels, audio URLs and peaks arrive; titles come after.
// Server text goes through textContent (imsEl). Keys: 1/2/3 switch, space plays, left/right choose.

function imsCompareWave(canvas, peaks, fraction, loop) {
  const width = canvas.clientWidth;
  const height = canvas.clientHeight;
  if (!width || !height) return;
  const ratio = window.devicePixelRatio || 1;
  canvas.width = Math.round(width * ratio);
  canvas.height = Math.round(height * ratio);
  const ctx = canvas.getContext("2d");
  if (!ctx) return;
  ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
  ctx.clearRect(0, 0, width, height);
  const style = getComputedStyle(canvas);
  const played = style.getPropertyValue("--ims-accent").trim() || "#1976d2";
  const rest = style.getPropertyValue("--ims-wave").trim() || "#9e9e9e";
  if (loop) {
    ctx.fillStyle = "rgba(25, 118, 210, 0.15)";
    ctx.fillRect(loop[0] * width, 0, (loop[1] - loop[0]) * width, height);
  }
  const middle = height / 2;
  const list = peaks && peaks.length ? peaks : [[-0.02, 0.02]];
  const bar = width / list.length;
  for (let i = 0; i < list.length; i++) {
    const [low, high] = list[i];
    const top = middle - Math.max(0.02, high) * middle;
    const bottom = middle - Math.min(-0.02, low) * middle;
    ctx.fillStyle = (i + 0.5) / list.length <= fraction ? played : rest;
    ctx.fillRect(i * bar, top, Math.max(1, bar - 1), bottom - top);
  }
}

function imsCompareView(root, model) {
  const state = { current: "A", loop: null, data: {}, read: {} }; // read: peaks read from the audio, by URL
  const audio = document.createElement("audio");
  audio.preload = "metadata";
  root.tabIndex = 0;
  // its keys (1/2/3, space, arrows) are the comparison's, not JupyterLab's cell shortcuts ("2" makes a heading)
  root.setAttribute("data-lm-suppress-shortcuts", "true");
  root.setAttribute("role", "group");
  root.setAttribute("aria-label", "Blind comparison: 1 and 2 switch, space plays, left and right choose");
  const question = imsEl("div", "ims-compare-question");
  const players = imsEl("div", "ims-compare-players");
  const transport = imsEl("div", "ims-compare-transport");
  const play = imsEl("button", "ims-compare-play", "Play");
  play.type = "button";
  const time = imsEl("span", "ims-compare-time", "0:00");
  const clearLoop = imsEl("button", "ims-compare-clear-loop", "Clear loop");
  clearLoop.type = "button";
  clearLoop.title = "Drag across a waveform to loop a region; this plays the whole song again";
  const choices = imsEl("div", "ims-compare-choices");
  const note = imsEl("div", "ims-compare-note");
  transport.append(play, time, clearLoop);
  root.append(question, players, transport, choices, note, audio);

  const fraction = () => (audio.duration && isFinite(audio.duration) ? audio.currentTime / audio.duration : 0);
  const redraw = () => {
    for (const row of players.children) {
      const canvas = row.querySelector("canvas");
      const label = row.dataset.label;
      const player = (state.data.players || []).find((p) => p.label === label) || {};
      const peaks = player.peaks && player.peaks.length ? player.peaks : state.read[player.audio];
      imsCompareWave(canvas, peaks, label === state.current ? fraction() : 0, label === state.current ? state.loop : null);
      row.classList.toggle("ims-compare-current", label === state.current);
    }
    time.textContent = imsClock(audio.currentTime || 0) + " · " + state.current;
    play.textContent = audio.paused ? "Play" : "Pause";
  };
  const select = (label) => {
    const player = (state.data.players || []).find((p) => p.label === label);
    if (!player) return;
    const at = audio.currentTime || 0;
    const playing = !audio.paused;
    state.current = label;
    if (audio.getAttribute("src") !== player.audio) {
      audio.setAttribute("src", player.audio);
      audio.addEventListener(
        "loadedmetadata",
        () => {
          audio.currentTime = Math.min(at, audio.duration || at);
          if (playing) audio.play().catch(() => {});
          redraw();
        },
        { once: true },
      );
      audio.load();
    }
    redraw();
  };
  const toggle = () => {
    if (!audio.getAttribute("src")) select(state.current);
    if (audio.paused) audio.play().catch(() => {});
    else audio.pause();
  };
  const choose = (label) => {
    if (!state.data.revealed) model.send({ kind: "pick", label });
  };
  play.addEventListener("click", toggle);
  clearLoop.addEventListener("click", () => {
    state.loop = null;
    redraw();
  });
  audio.addEventListener("timeupdate", () => {
    if (state.loop && audio.duration && audio.currentTime >= state.loop[1] * audio.duration) {
      audio.currentTime = state.loop[0] * audio.duration;
    }
    redraw();
  });
  audio.addEventListener("play", redraw);
  audio.addEventListener("pause", redraw);
  root.addEventListener("keydown", (event) => {
    const keys = { 1: "A", 2: "B", 3: "X" };
    if (keys[event.key]) select(keys[event.key]);
    else if (event.key === " ") toggle();
    else if (event.key === "ArrowLeft") choose("A");
    else if (event.key === "ArrowRight") choose("B");
    else return;
    event.preventDefault();
    event.stopPropagation();
  });

  const draw = () => {
    state.data = model.get("data") || {};
    root.hidden = !(state.data.players || []).length; // nothing loaded yet: nothing drawn
    const pair = (state.data.players || []).map((p) => p.audio).join(" ");
    if (pair !== state.pair) {
      // another pair of songs: a new blind round starts on A, from the top
      state.pair = pair;
      state.current = "A";
      state.loop = null;
      audio.pause();
      audio.removeAttribute("src");
    }
    question.textContent = state.data.question || "";
    players.replaceChildren();
    for (const player of state.data.players || []) {
      const row = imsEl("div", "ims-compare-player");
      row.dataset.label = player.label;
      const pick = imsEl("button", "ims-compare-label", player.label);
      pick.type = "button";
      pick.title = "Listen to " + player.label + " (key " + ({ A: 1, B: 2, X: 3 }[player.label] || "") + ")";
      pick.setAttribute("aria-label", pick.title);
      pick.addEventListener("click", () => select(player.label));
      const canvas = imsEl("canvas", "ims-compare-wave");
      canvas.title = "Click to seek; drag to loop a region";
      row.dataset.peaks = player.peaks && player.peaks.length ? "kernel" : "reading";
      if (row.dataset.peaks === "reading" && player.audio) {
        // no dead flat line: the kernel has no peaks, so read them from the file (as a song card does)
        imsBrowserPeaks(player.audio).then(
          (peaks) => {
            state.read[player.audio] = peaks;
            row.dataset.peaks = "browser";
            redraw();
          },
          () => {
            row.dataset.peaks = "none";
          },
        );
      }
      let down = null;
      canvas.addEventListener("mousedown", (event) => {
        down = event.offsetX / Math.max(1, canvas.clientWidth);
      });
      canvas.addEventListener("mouseup", (event) => {
        const up = event.offsetX / Math.max(1, canvas.clientWidth);
        if (player.label !== state.current) select(player.label);
        if (down !== null && Math.abs(up - down) > 0.02) state.loop = [Math.min(up, down), Math.max(up, down)];
        const go = () => {
          if (audio.duration) audio.currentTime = (state.loop && Math.abs(up - down) > 0.02 ? state.loop[0] : up) * audio.duration;
          redraw();
        };
        if (audio.readyState >= 1) go();
        else audio.addEventListener("loadedmetadata", go, { once: true });
        down = null;
      });
      const who = imsEl("div", "ims-compare-who");
      if (state.data.revealed && player.title) {
        who.appendChild(imsEl("strong", "ims-compare-title", player.title));
        who.appendChild(imsEl("span", "ims-compare-details", player.details || ""));
      } else {
        who.appendChild(imsEl("span", "ims-compare-hidden", "hidden until you choose"));
      }
      row.append(pick, canvas, who);
      players.appendChild(row);
    }
    choices.replaceChildren();
    if (!state.data.revealed) {
      const words = state.data.mode === "abx" ? ["X is A (←)", "X is B (→)"] : ["A is better (←)", "B is better (→)"];
      for (const [label, text] of [["A", words[0]], ["B", words[1]]]) {
        const button = imsEl("button", "ims-compare-choose", text);
        button.type = "button";
        button.dataset.label = label;
        button.addEventListener("click", () => choose(label));
        choices.appendChild(button);
      }
    }
    note.textContent = state.data.note || "";
    if (!audio.getAttribute("src") && (state.data.players || []).length) select(state.current);
    redraw();
  };
  model.on("change:data", draw);
  draw();
  return () => {
    model.off("change:data", draw);
    audio.pause();
  };
}

export default {
  render({ model, el }) {
    const root = imsEl("div", "ipymusicgen-compare");
    el.appendChild(root);
    return imsCompareView(root, model);
  },
};
