// Blind comparison: one shared player for A, B (and X), waveforms to seek and loop, keys, and the vote.
// Python decides what is shown: before the vote only labels, opaque sources and the round arrive; the sound
// comes from the kernel when a player starts (imsKernelAudio: a blob: URL per player, released with the view),
// and every waveform is the same neutral drawing until the vote reveals the songs (titles, their own peaks).
// Server text goes through textContent (imsEl). Keys: 1/2/3 switch, space plays, left/right choose (A/B also: up
// a tie, down both bad). While it plays, the page reports its player's source and position ({kind: "listen"}):
// the kernel counts each side's listening on its own clock and tells the seconds left ({kind: "listened"}); until
// they are 0 the choice buttons say how long is left and do nothing (the kernel refuses such a vote anyway).
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

/** What every player draws until the vote: one band, the same for all (a song's own peaks would name it). */
const IMS_COMPARE_NEUTRAL = [[-0.35, 0.35]];
/** The choices and their keys: A/B has Music Arena's four, ABX two. */
const IMS_COMPARE_CHOICES = {
  ab: [["A", "A is better", "←"], ["B", "B is better", "→"], ["tie", "Tie", "↑"], ["both_bad", "Both bad", "↓"]],
  abx: [["A", "X is A", "←"], ["B", "X is B", "→"]],
};
const IMS_COMPARE_KEYS = { ArrowLeft: "A", ArrowRight: "B", ArrowUp: "tie", ArrowDown: "both_bad" };

function imsCompareView(root, model) {
  const state = { current: "A", loop: null, data: {}, read: {}, round: undefined, wantPlay: false, loading: "", left: {} };
  const kernel = imsKernelAudio(model);
  const audio = document.createElement("audio");
  audio.preload = "metadata";
  root.tabIndex = 0;
  // its keys (1/2/3, space, arrows) are the comparison's, not JupyterLab's cell shortcuts ("2" makes a heading)
  root.setAttribute("data-lm-suppress-shortcuts", "true");
  root.setAttribute("role", "group");
  root.setAttribute("aria-label", "Blind comparison: 1 and 2 switch, space plays, left and right choose, up a tie, down both bad");
  const question = imsEl("div", "ims-compare-question");
  const players = imsEl("div", "ims-compare-players");
  const transport = imsEl("div", "ims-compare-transport");
  const play = imsTextButton("ims-compare-play", "Play");
  const time = imsEl("span", "ims-compare-time", "0:00");
  const clearLoop = imsTextButton("ims-compare-clear-loop", "Clear loop", "Drag across a waveform to loop a region; this plays the whole song again");
  const choices = imsEl("div", "ims-compare-choices");
  const wait = imsEl("div", "ims-compare-wait");
  wait.setAttribute("role", "status");
  const note = imsEl("div", "ims-compare-note");
  const trouble = imsEl("div", "ims-compare-trouble");
  trouble.setAttribute("role", "status");
  transport.append(play, time, clearLoop);
  root.append(question, players, transport, choices, wait, note, trouble, audio);

  const playerOf = (label) => (state.data.players || []).find((p) => p.label === label);
  const rowOf = (label) => [...players.children].find((row) => row.dataset.label === label);
  const fraction = () => (audio.duration && isFinite(audio.duration) ? audio.currentTime / audio.duration : 0);
  const peaksOf = (player) => {
    if (!state.data.revealed) return IMS_COMPARE_NEUTRAL;
    if (player.peaks && player.peaks.length) return player.peaks;
    return state.read[player.source] || IMS_COMPARE_NEUTRAL;
  };
  const redraw = () => {
    for (const row of players.children) {
      const label = row.dataset.label;
      const here = label === state.current;
      imsCompareWave(row.querySelector("canvas"), peaksOf(playerOf(label) || {}), here ? fraction() : 0, here ? state.loop : null);
      row.classList.toggle("ims-compare-current", here);
    }
    time.textContent = state.loading ? "Loading " + state.loading + "…" : imsClock(audio.currentTime || 0) + " · " + state.current;
    play.textContent = audio.paused ? "Play" : "Pause";
  };
  // after the vote: a song without peaks from the kernel gets them read from the sound this page already has
  const readPeaks = (player) => {
    const url = kernel.loaded(player.source);
    const row = rowOf(player.label);
    if (!state.data.revealed || !url || !row || (player.peaks && player.peaks.length) || state.read[player.source]) return;
    row.dataset.peaks = "reading";
    imsBrowserPeaks(url).then(
      (peaks) => {
        state.read[player.source] = peaks;
        const current = rowOf(player.label);
        if (current) current.dataset.peaks = "browser";
        redraw();
      },
      () => {
        const current = rowOf(player.label);
        if (current) current.dataset.peaks = "none";
      },
    );
  };
  const select = (label) => {
    const player = playerOf(label);
    if (!player) return;
    if (label !== state.current) report(); // the last player's stretch ends here
    const at = audio.currentTime || 0;
    const playing = !audio.paused || state.wantPlay;
    state.wantPlay = false;
    state.current = label;
    const round = state.round;
    const use = (url) => {
      if (state.round !== round || state.current !== label) return; // switched again meanwhile
      state.loading = "";
      trouble.textContent = "";
      if (audio.getAttribute("src") !== url) {
        // every player has its own blob: switching always reloads, the same way for every player
        audio.setAttribute("src", url);
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
      readPeaks(player);
      redraw();
    };
    const ready = kernel.loaded(player.source);
    if (ready) use(ready);
    else {
      audio.pause(); // not the last player's sound while this one comes from the kernel
      state.wantPlay = playing;
      state.loading = label;
      kernel.url(player.source).then(use, (error) => {
        if (state.round !== round || state.current !== label) return;
        state.loading = "";
        trouble.textContent = String((error && error.message) || error);
        redraw();
      });
    }
    redraw();
  };
  const toggle = () => {
    if (!audio.getAttribute("src")) {
      state.wantPlay = true;
      select(state.current);
      return;
    }
    if (audio.paused) audio.play().catch(() => {});
    else audio.pause();
  };
  const secondsLeft = () => {
    if (state.data.mode !== "ab" || state.data.revealed) return 0;
    return Object.values(state.left || {}).reduce((sum, s) => sum + Math.max(0, Number(s) || 0), 0);
  };
  // the buttons are made once a draw and only relabelled as the seconds left change (a click is never lost)
  const showLeft = () => {
    const left = secondsLeft();
    for (const button of choices.children) {
      const text = button.dataset.text + " (" + button.dataset.key + ")";
      button.textContent = left > 0 ? text + " · " + Math.ceil(left) + " s left" : text;
      button.disabled = left > 0;
    }
    const need = Math.max(0, ...Object.values((state.data.listen || {}).need || {}).map(Number));
    const parts = Object.entries(state.left || {}).filter(([, s]) => s > 0).map(([label, s]) => label + " " + Math.ceil(s) + " s more");
    wait.textContent = left > 0 ? "A vote counts once each take has played " + need + " s: " + parts.join(", ") + "." : "";
  };
  const choose = (label) => {
    if (state.data.revealed || secondsLeft() > 0) return;
    model.send({ kind: "pick", label, round: state.data.round });
  };
  // what the player does, for the kernel's count: this round, this player, playing or not, where
  const report = () => {
    const player = playerOf(state.current);
    if (!player || state.data.mode !== "ab" || state.data.revealed || state.loading) return;
    const playing = !audio.paused && !audio.ended && audio.readyState >= 2;
    model.send({ kind: "listen", round: state.data.round, source: player.source, playing, at: audio.currentTime || 0 });
  };
  const heard = (message) => {
    if (!message || message.kind !== "listened" || message.round !== state.data.round) return;
    state.left = message.left || {};
    showLeft();
  };
  model.on("msg:custom", heard);
  play.addEventListener("click", toggle);
  clearLoop.addEventListener("click", () => {
    state.loop = null;
    redraw();
  });
  audio.addEventListener("timeupdate", () => {
    report();
    if (state.loop && audio.duration && audio.currentTime >= state.loop[1] * audio.duration) {
      audio.currentTime = state.loop[0] * audio.duration;
    }
    redraw();
  });
  for (const event of ["play", "playing", "pause", "ended"]) {
    audio.addEventListener(event, () => {
      report();
      redraw();
    });
  }
  root.addEventListener("keydown", (event) => {
    const keys = { 1: "A", 2: "B", 3: "X" };
    const choice = IMS_COMPARE_KEYS[event.key];
    const offered = (IMS_COMPARE_CHOICES[state.data.mode] || []).some(([label]) => label === choice);
    if (keys[event.key]) select(keys[event.key]);
    else if (event.key === " ") toggle();
    else if (choice && offered) choose(choice);
    else return;
    event.preventDefault();
    event.stopPropagation();
  });

  const draw = () => {
    state.data = model.get("data") || {};
    const list = state.data.players || [];
    root.hidden = !list.length; // nothing loaded yet: nothing drawn
    if (state.data.round !== state.round) {
      // another pair: a new blind round starts on A, from the top; the last round's sound is released
      state.round = state.data.round;
      state.current = "A";
      state.loop = null;
      state.wantPlay = false;
      state.loading = "";
      state.read = {};
      audio.pause();
      audio.removeAttribute("src");
      trouble.textContent = "";
      kernel.keep(list.map((p) => p.source));
    }
    state.left = (state.data.listen || {}).left || {}; // the kernel's count when it drew (then "listened" news)
    question.textContent = state.data.question || "";
    players.replaceChildren();
    for (const player of list) {
      const row = imsEl("div", "ims-compare-player");
      row.dataset.label = player.label;
      row.dataset.peaks = !state.data.revealed ? "neutral" : player.peaks && player.peaks.length ? "kernel" : "none";
      const key = { A: 1, B: 2, X: 3 }[player.label] || "";
      const pick = imsTextButton("ims-compare-label", player.label, `Listen to ${player.label} (key ${key})`, () => select(player.label), true);
      const canvas = imsEl("canvas", "ims-compare-wave");
      canvas.title = "Click to seek; drag to loop a region";
      let down = null;
      canvas.addEventListener("mousedown", (event) => {
        down = event.offsetX / Math.max(1, canvas.clientWidth);
      });
      canvas.addEventListener("mouseup", (event) => {
        const up = event.offsetX / Math.max(1, canvas.clientWidth);
        if (player.label !== state.current) select(player.label);
        if (down !== null && Math.abs(up - down) > 0.02) state.loop = [Math.min(up, down), Math.max(up, down)];
        const looped = down !== null && Math.abs(up - down) > 0.02;
        const go = () => {
          if (audio.duration) audio.currentTime = (state.loop && looped ? state.loop[0] : up) * audio.duration;
          redraw();
        };
        if (audio.readyState >= 1 && !state.loading) go();
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
      for (const [label, text, key] of IMS_COMPARE_CHOICES[state.data.mode] || IMS_COMPARE_CHOICES.ab) {
        const button = imsTextButton("ims-compare-choose", text, "", () => choose(label));
        Object.assign(button.dataset, { label, text, key });
        choices.appendChild(button);
      }
    }
    showLeft();
    note.textContent = state.data.note || "";
    if (state.data.revealed) for (const player of list) readPeaks(player);
    if (!audio.getAttribute("src") && !state.loading && list.length) select(state.current);
    redraw();
  };
  model.on("change:data", draw);
  draw();
  return () => {
    model.off("change:data", draw);
    model.off("msg:custom", heard);
    audio.pause();
    audio.removeAttribute("src");
    kernel.release(); // the blob: URLs go with the view
  };
}

export default {
  render({ model, el }) {
    const root = imsEl("div", "ipymusicgen-compare");
    el.appendChild(root);
    return imsCompareView(root, model);
  },
};
