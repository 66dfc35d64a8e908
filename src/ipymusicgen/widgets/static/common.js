// ipymusicgen shared front-end kit: buttons, option lists, the song card and the call group (docs/frontend.md).
// Plain functions, no `export`: Python joins this file with each view's module (widgets/_static.py).
// Rules: server text only through textContent; URLs only when Python put them in the data (it keeps
// http(s) only); every decision (state, label, actions) was taken in Python; the JS draws and sends intents.

const IMS_ICONS = {
  // 24x24 single-path icons (static strings, never data)
  play: "M8 5v14l11-7z",
  pause: "M6 5h4v14H6zM14 5h4v14h-4z",
  extend: "M4 6v12l8.5-6zM13 6v12l8.5-6z",
  concat: "M10.6 13.4a1 1 0 0 1 0-1.4l3-3a3 3 0 1 1 4.2 4.2l-1.5 1.5-1.4-1.4 1.5-1.5a1 1 0 1 0-1.4-1.4l-3 3a1 1 0 0 1-1.4 0zM13.4 10.6a1 1 0 0 1 0 1.4l-3 3a3 3 0 1 1-4.2-4.2l1.5-1.5 1.4 1.4-1.5 1.5a1 1 0 1 0 1.4 1.4l3-3a1 1 0 0 1 1.4 0z",
  download: "M11 4h2v8.2l3.3-3.3 1.4 1.4L12 16 6.3 10.3l1.4-1.4L11 12.2zM5 18h14v2H5z",
  favourite: "M12 20.5l-1.4-1.3C5.4 14.5 2 11.4 2 7.6 2 4.5 4.4 2 7.5 2c1.7 0 3.4.8 4.5 2.1C13.1 2.8 14.8 2 16.5 2 19.6 2 22 4.5 22 7.6c0 3.8-3.4 6.9-8.6 11.6z",
  keep: "M9 16.2l-4.2-4.2-1.4 1.4L9 19 21 7l-1.4-1.4z",
  copy_id: "M16 1H4a2 2 0 0 0-2 2v14h2V3h12zm3 4H8a2 2 0 0 0-2 2v14a2 2 0 0 0 2 2h11a2 2 0 0 0 2-2V7a2 2 0 0 0-2-2zm0 16H8V7h11z",
  export: "M10 4l2 2h8a2 2 0 0 1 2 2v10a2 2 0 0 1-2 2H4a2 2 0 0 1-2-2V6a2 2 0 0 1 2-2zm1 6v3H8l4 4 4-4h-3v-3z",
  wav: "M3 10h2v4H3zm4-4h2v12H7zm4 -3h2v18h-2zm4 5h2v8h-2zm4 2h2v4h-2z",
  mp4: "M4 5h12a2 2 0 0 1 2 2v2.5l4-3v11l-4-3V17a2 2 0 0 1-2 2H4a2 2 0 0 1-2-2V7a2 2 0 0 1 2-2z",
};

const IMS_ACTION_LABELS = {
  keep: "Keep this take (the other one of its call is not kept)",
  extend: "Extend this song",
  concat: "Join its continuations into one song",
  download: "Download the audio file",
  export: "Export as a folder: audio, cover, lyrics and how it was made (free)",
  wav: "Make its WAV (paid once, then reused; asks first)",
  mp4: "Make its MP4 video (paid once, then reused; asks first)",
  favourite: "Favourite",
  copy_id: "Copy the song id",
};

/** The short word shown beside each action's icon (the long label is its tooltip and accessible name). */
const IMS_ACTION_WORDS = { keep: "Keep", extend: "Extend", concat: "Join", download: "Download", export: "Export", wav: "WAV", mp4: "MP4", favourite: "Favourite", copy_id: "Copy id" };

/** An element with a class and (optional) plain text. */
function imsEl(tag, cls, text) {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  if (text !== undefined && text !== null) node.textContent = String(text);
  return node;
}

/** An inline SVG icon from the static table above. */
function imsIcon(name) {
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("viewBox", "0 0 24 24");
  svg.setAttribute("aria-hidden", "true");
  svg.setAttribute("focusable", "false");
  const path = document.createElementNS(ns, "path");
  path.setAttribute("d", IMS_ICONS[name] || "");
  svg.appendChild(path);
  return svg;
}

/** The one text button of every view: words (or a symbol such as ‹) on it, an optional tooltip, an intent on
 *  click. Its accessible name is its text; `named` makes it the tooltip instead (a symbol needs words). */
function imsTextButton(cls, text, title, onClick, named) {
  const button = imsEl("button", cls, text);
  button.type = "button";
  if (title) button.title = title;
  if (named && title) button.setAttribute("aria-label", title);
  if (onClick) button.addEventListener("click", onClick);
  return button;
}

/** A <select> with a tooltip and accessible name that calls `onChange(value)` when a person picks. */
function imsSelect(cls, label, onChange) {
  const select = imsEl("select", cls);
  if (label) {
    select.title = label;
    select.setAttribute("aria-label", label);
  }
  if (onChange) select.addEventListener("change", () => onChange(select.value));
  return select;
}

/** Fill a <select> with `[text, value]` pairs (as Python sends them), rebuilt only when they changed, then
 *  choose `current`. The options are text (textContent), whatever the service or the user named them. */
function imsOptions(select, pairs, current) {
  const key = JSON.stringify(pairs);
  if (select._imsOptions !== key) {
    select._imsOptions = key;
    select.replaceChildren(
      ...pairs.map(([text, value]) => {
        const option = imsEl("option", null, text);
        option.value = String(value);
        return option;
      })
    );
  }
  select.value = current === undefined || current === null ? "" : String(current);
}

/** Draw a child view (a `WidgetTrait` reference the kernel set) into `box`, through anywidget's host (0.11+);
 *  what went wrong is said in the box, as text. `signal` ends the child's view (default: with the parent's). */
function imsDrawChild(host, ref, box, signal) {
  if (!host) {
    box.appendChild(imsEl("p", "ims-muted", "This front end cannot show views inside views (it needs anywidget 0.11)."));
    return;
  }
  host
    .getWidget(ref)
    .then((child) => child.render(signal ? { el: box, signal } : { el: box }))
    .catch((error) => box.appendChild(imsEl("p", "ims-muted", `Could not show this view: ${error}`)));
}

/** A compact icon button with a tooltip and a label for screen readers. */
function imsButton(icon, label, onClick) {
  const button = imsEl("button", "ims-icon-button");
  button.type = "button";
  button.title = label;
  button.setAttribute("aria-label", label);
  button.appendChild(imsIcon(icon));
  button.addEventListener("click", onClick);
  return button;
}

/** "2:05" from seconds; "—" when unknown. */
function imsClock(seconds) {
  if (seconds === null || seconds === undefined || !isFinite(seconds)) return "—";
  const whole = Math.max(0, Math.round(seconds));
  return `${Math.floor(whole / 60)}:${String(whole % 60).padStart(2, "0")}`;
}

/** "42 s" or "3 min 5 s". */
function imsElapsed(seconds) {
  if (seconds === null || seconds === undefined || !isFinite(seconds)) return "";
  const whole = Math.max(0, Math.floor(seconds));
  return whole >= 60 ? `${Math.floor(whole / 60)} min ${whole % 60} s` : `${whole} s`;
}

const IMS_RUNNING = new Set(["queued", "writing", "preview"]);

/** The badge text: Python's label, then the elapsed time (counted on locally while the song runs). */
function imsBadgeText(card) {
  const data = card._ims.data;
  let seconds = data.elapsed_s;
  if (seconds !== null && seconds !== undefined && IMS_RUNNING.has(data.state)) {
    seconds += (Date.now() - card._ims.receivedAt) / 1000;
  }
  const elapsed = imsElapsed(seconds);
  if (!elapsed) return data.state_label;
  if (IMS_RUNNING.has(data.state)) return seconds >= 1 ? `${data.state_label} · ${elapsed} so far` : data.state_label;
  // under a second: it was finished before this view saw it cook, so no time is claimed
  return data.state === "ready" && seconds >= 1 ? `${data.state_label} · made in ${elapsed}` : data.state_label;
}

/** The lyrics as one text line each (textContent only), so the line being sung can be marked (`line_times`:
 * `[start_s, end_s]` per line, or null, from the engine's word timestamps); without times, one text. */
function imsLyricLines(pre, lyrics, times) {
  if (!Array.isArray(times) || !times.length) {
    pre.textContent = lyrics;
    return;
  }
  const parts = [];
  lyrics.split("\n").forEach((line, index) => {
    if (index) parts.push(document.createTextNode("\n"));
    const span = imsEl("span", "ims-line");
    span.textContent = line;
    const at = times[index];
    if (Array.isArray(at) && at.length === 2 && isFinite(at[0]) && isFinite(at[1])) {
      span.dataset.start = String(at[0]);
      span.dataset.end = String(at[1]);
    }
    parts.push(span);
  });
  pre.replaceChildren(...parts);
}

/** Mark the line being sung at the player's time (`aria-current`), and bring it into view inside the lyrics. */
function imsSungLine(card) {
  const ims = card._ims;
  if (!ims || !ims.lyrics) return;
  const now = ims.audio.currentTime || 0;
  const playing = Boolean(ims.audio.getAttribute("src")) && now > 0;
  for (const span of ims.lyrics.querySelectorAll("span.ims-line[data-start]")) {
    const sung = playing && now >= Number(span.dataset.start) && now < Number(span.dataset.end) + 0.25;
    if (sung === span.classList.contains("ims-sung")) continue;
    span.classList.toggle("ims-sung", sung);
    if (sung) {
      span.setAttribute("aria-current", "true");
      const pre = span.parentElement;
      if (pre && ims.lyrics.open) pre.scrollTop = Math.max(0, span.offsetTop - pre.offsetTop - pre.clientHeight / 3);
    } else span.removeAttribute("aria-current");
  }
}

/** Refresh the elapsed time of every running card under `root` (views call it once a second). */
function tickSongCards(root) {
  for (const card of root.querySelectorAll(".ipymusicgen-song")) {
    if (card._ims && IMS_RUNNING.has(card._ims.data.state)) card._ims.badge.textContent = imsBadgeText(card);
  }
}

const IMS_DECODE = { queue: Promise.resolve(), cache: new Map() };
const IMS_DECODE_MAX_BYTES = 40 * 1024 * 1024;
const IMS_DECODE_POINTS = 200;
const IMS_DECODE_CACHED = 200;

/**
 * Peaks of a finished song read from its audio file, when the kernel has none (not archived yet, or the
 * sandbox's): fetched once per URL, decoded one file at a time at 8 kHz, a bounded number kept. Rejects when
 * the host does not let the page read the file, or it is too large; the card then says it has no waveform.
 */
function imsBrowserPeaks(url) {
  if (IMS_DECODE.cache.has(url)) return IMS_DECODE.cache.get(url);
  const job = IMS_DECODE.queue.then(async () => {
    const response = await fetch(url, { mode: "cors", credentials: "omit" });
    if (!response.ok) throw new Error(`HTTP ${response.status}`);
    if (Number(response.headers.get("content-length") || 0) > IMS_DECODE_MAX_BYTES) throw new Error("too large");
    const bytes = await response.arrayBuffer();
    if (bytes.byteLength > IMS_DECODE_MAX_BYTES) throw new Error("too large");
    const Offline = window.OfflineAudioContext || window.webkitOfflineAudioContext;
    const audio = await new Offline(1, 1, 8000).decodeAudioData(bytes);
    const samples = audio.getChannelData(0);
    const step = Math.max(1, Math.floor(samples.length / IMS_DECODE_POINTS));
    const peaks = [];
    for (let start = 0; start + step <= samples.length && peaks.length < IMS_DECODE_POINTS; start += step) {
      let low = 0;
      let high = 0;
      for (let i = start; i < start + step; i++) {
        if (samples[i] < low) low = samples[i];
        else if (samples[i] > high) high = samples[i];
      }
      peaks.push([low, high]);
    }
    return peaks;
  });
  IMS_DECODE.queue = job.catch(() => {});
  IMS_DECODE.cache.set(url, job);
  if (IMS_DECODE.cache.size > IMS_DECODE_CACHED) IMS_DECODE.cache.delete(IMS_DECODE.cache.keys().next().value);
  return job;
}

/** The card's waveform state: shimmer while a song runs or its peaks are being read; decode when none came. */
function imsWaveState(card) {
  const ims = card._ims;
  const data = ims.data;
  const kernelPeaks = Boolean(data.peaks && data.peaks.length);
  if (!kernelPeaks && data.state === "ready" && data.audio_url && ims.decodedUrl !== data.audio_url) {
    const url = data.audio_url;
    ims.decodedUrl = url;
    ims.browserPeaks = null;
    ims.decodeFailed = false;
    imsBrowserPeaks(url).then(
      (peaks) => {
        if (ims.decodedUrl !== url) return;
        ims.browserPeaks = peaks;
        imsWaveState(card);
        imsDrawWave(card);
      },
      () => {
        if (ims.decodedUrl !== url) return;
        ims.decodeFailed = true;
        imsWaveState(card);
        imsDrawWave(card);
      },
    );
  }
  const reading = !kernelPeaks && data.state === "ready" && !ims.browserPeaks && !ims.decodeFailed;
  ims.wave.classList.toggle("ims-shimmer", !kernelPeaks && (IMS_RUNNING.has(data.state) || reading));
  ims.wave.dataset.peaks = kernelPeaks ? "kernel" : ims.browserPeaks ? "browser" : reading ? "reading" : "none";
  ims.wave.title = ims.decodeFailed && !kernelPeaks ? "No waveform: the audio's host does not let this page read the file" : "";
}

/** Draw the waveform: peaks as bars (played part in the accent colour) or a flat line while none. */
function imsDrawWave(card) {
  const { canvas, audio, data } = card._ims;
  const width = canvas.clientWidth;
  const height = canvas.clientHeight;
  if (!width || !height) return;
  const ratio = window.devicePixelRatio || 1;
  if (canvas.width !== Math.round(width * ratio)) canvas.width = Math.round(width * ratio);
  if (canvas.height !== Math.round(height * ratio)) canvas.height = Math.round(height * ratio);
  const ctx = canvas.getContext("2d");
  if (!ctx) return;
  ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
  ctx.clearRect(0, 0, width, height);
  const style = getComputedStyle(card);
  const played = style.getPropertyValue("--ims-accent").trim() || "#1976d2";
  const rest = style.getPropertyValue("--ims-wave").trim() || "#9e9e9e";
  const duration = audio.duration && isFinite(audio.duration) ? audio.duration : data.duration_s || 0;
  const fraction = duration ? Math.min(1, audio.currentTime / duration) : 0;
  const peaks = data.peaks && data.peaks.length ? data.peaks : card._ims.browserPeaks || [];
  const middle = height / 2;
  if (!peaks.length) {
    ctx.fillStyle = rest;
    ctx.fillRect(0, middle - 1, width, 2);
    ctx.fillStyle = played;
    ctx.fillRect(0, middle - 1, width * fraction, 2);
    return;
  }
  const bar = width / peaks.length;
  for (let i = 0; i < peaks.length; i++) {
    const [low, high] = peaks[i];
    const top = middle - Math.max(0.02, high) * middle;
    const bottom = middle - Math.min(-0.02, low) * middle;
    ctx.fillStyle = (i + 0.5) / peaks.length <= fraction ? played : rest;
    ctx.fillRect(i * bar, top, Math.max(1, bar - 1), bottom - top);
  }
}

/** Seek the card's audio to a fraction of its length (click on the waveform, or arrow keys). */
function imsSeek(card, fraction) {
  const { audio, data } = card._ims;
  if (!audio.getAttribute("src")) {
    // its bytes first (no play), then the place; a refusal is said on the card and asks no more
    if (data.play_source) imsKernelPlay(card, false).then(() => audio.getAttribute("src") && imsSeek(card, fraction));
    return;
  }
  const go = () => {
    const duration = isFinite(audio.duration) ? audio.duration : data.duration_s;
    if (duration) audio.currentTime = Math.max(0, Math.min(1, fraction)) * duration;
    imsDrawWave(card);
  };
  if (audio.readyState >= 1) go();
  else audio.addEventListener("loadedmetadata", go, { once: true });
}

function imsUpdateTime(card) {
  const { audio, time, data } = card._ims;
  const duration = isFinite(audio.duration) ? audio.duration : data.duration_s;
  time.textContent = audio.getAttribute("src") && audio.currentTime ? `${imsClock(audio.currentTime)} / ${imsClock(duration)}` : imsClock(duration);
}

/**
 * Build one song card in `container` and return it. `data` is the dict of `song_data.song_card()`;
 * `send(message)` sends an intent to Python (`{kind, id}`). Update it later with `updateSongCard`.
 */
function renderSongCard(container, data, send) {
  const card = imsEl("div", "ipymusicgen-song");
  const cover = imsEl("div", "ims-cover");
  const image = imsEl("img");
  image.alt = "";
  image.loading = "lazy";
  image.addEventListener("error", () => cover.classList.remove("ims-has-image"));
  image.addEventListener("load", () => cover.classList.add("ims-has-image"));
  cover.appendChild(image);
  const main = imsEl("div", "ims-main");
  const head = imsEl("div", "ims-head");
  const take = imsEl("span", "ims-take");
  const title = imsEl("span", "ims-title");
  const badge = imsEl("span", "ims-badge");
  badge.setAttribute("role", "status");
  head.append(take, title, badge);
  const chips = imsEl("div", "ims-chips");
  const player = imsEl("div", "ims-player");
  const play = imsButton("play", "Play", () => {
    if (!audio.paused) {
      card._ims.wantPlay = false;
      audio.pause();
    } else if (audio.getAttribute("src")) {
      card._ims.wantPlay = true;
      audio.play().catch(() => {}); // a source that fails says so by its error event: the kernel's bytes then
    } else imsKernelPlay(card);
  });
  play.classList.add("ims-play");
  const wave = imsEl("div", "ipymusicgen-waveform");
  wave.tabIndex = 0;
  wave.setAttribute("role", "slider");
  wave.setAttribute("aria-label", "Seek");
  wave.setAttribute("aria-valuemin", "0");
  wave.setAttribute("aria-valuemax", "100");
  const canvas = imsEl("canvas");
  wave.appendChild(canvas);
  const time = imsEl("span", "ims-time");
  const audio = imsEl("audio");
  audio.preload = "metadata";
  audio.autoplay = false;
  audio.loop = false;
  player.append(play, wave, time, audio);
  const failure = imsEl("div", "ims-failure");
  const lyrics = imsEl("details", "ims-lyrics");
  lyrics.append(imsEl("summary", null, "Lyrics"), imsEl("pre"));
  const actions = imsEl("div", "ims-actions");
  const note = imsEl("div", "ims-note");
  main.append(head, chips, player, failure, lyrics, actions, note);
  card.append(cover, main);

  card._ims = { data, send, receivedAt: Date.now(), cover, image, take, title, badge, chips, wave, canvas, time, audio, play, failure, lyrics, actions, note, actionKey: null };
  wave.addEventListener("click", (event) => {
    const box = wave.getBoundingClientRect();
    if (box.width) imsSeek(card, (event.clientX - box.left) / box.width);
  });
  wave.addEventListener("keydown", (event) => {
    const duration = card._ims.data.duration_s || audio.duration;
    if (!duration || !isFinite(duration)) return;
    const step = event.key === "ArrowRight" ? 5 : event.key === "ArrowLeft" ? -5 : 0;
    if (!step) return;
    event.preventDefault();
    imsSeek(card, (audio.currentTime + step) / duration);
  });
  const redraw = () => {
    imsDrawWave(card);
    imsUpdateTime(card);
    const duration = isFinite(audio.duration) ? audio.duration : card._ims.data.duration_s;
    wave.setAttribute("aria-valuenow", String(duration ? Math.round((100 * audio.currentTime) / duration) : 0));
  };
  for (const name of ["timeupdate", "seeked", "loadedmetadata", "durationchange"]) audio.addEventListener(name, redraw);
  for (const name of ["timeupdate", "seeked"]) audio.addEventListener(name, () => imsSungLine(card));
  audio.addEventListener("error", () => {
    // The URL Python offered does not load here (expired, 404, no files/ API): the kernel's bytes, on the same press.
    const src = audio.getAttribute("src") || "";
    if (!src || src.startsWith("blob:")) return;
    card._ims.failedUrl = src;
    if (card._ims.send && card._ims.send.failedUrls) card._ims.send.failedUrls.add(src); // a redrawn card skips it
    audio.removeAttribute("src");
    imsPlayable(card);
    if (card._ims.wantPlay) imsKernelPlay(card);
  });
  audio.addEventListener("play", () => {
    play.replaceChildren(imsIcon("pause"));
    play.title = "Pause";
    play.setAttribute("aria-label", "Pause");
  });
  audio.addEventListener("pause", () => {
    play.replaceChildren(imsIcon("play"));
    play.title = "Play";
    play.setAttribute("aria-label", "Play");
  });
  if (typeof ResizeObserver !== "undefined") {
    card._ims.resize = new ResizeObserver(() => imsDrawWave(card));
    card._ims.resize.observe(wave);
  }
  updateSongCard(card, data, send);
  container.appendChild(card);
  return card;
}

/** Show new data in an existing card; only the parts whose value changed are touched. */
function updateSongCard(card, data, send) {
  const ims = card._ims;
  const old = ims.data === data ? {} : ims.data;
  const first = !ims.drawn;
  ims.data = data;
  ims.drawn = true;
  if (send) ims.send = send;
  ims.receivedAt = Date.now();
  const changed = (key) => first || JSON.stringify(old[key]) !== JSON.stringify(data[key]);
  card.dataset.take = String(data.take || 1);
  card.dataset.id = data.id;
  card.dataset.state = data.state;
  if (changed("take") || changed("call")) ims.take.textContent = data.call ? `Take ${data.take || 1}` : "";
  if (changed("title")) {
    ims.title.textContent = data.title || "Untitled";
    ims.title.title = data.title || "";
  }
  ims.badge.dataset.state = data.state;
  ims.badge.textContent = imsBadgeText(card);
  if (changed("style_chips") || changed("stars") || changed("measures")) {
    const chips = (data.style_chips || []).map((chip) => imsEl("span", "ims-chip", chip));
    for (const measure of data.measures || []) chips.push(imsEl("span", "ims-chip ims-measure", measure));
    if (data.stars) {
      const stars = imsEl("span", "ims-stars", "★".repeat(data.stars) + "☆".repeat(5 - data.stars));
      stars.setAttribute("aria-label", `${data.stars} of 5 stars`);
      stars.title = `rated ${data.stars} of 5`;
      chips.unshift(stars);
    }
    ims.chips.replaceChildren(...chips);
  }
  if (changed("cover_url")) {
    ims.cover.classList.remove("ims-has-image");
    if (data.cover_url) ims.image.src = data.cover_url;
    else ims.image.removeAttribute("src");
  }
  // A card with no `play_url` plays its `audio_url` (the watcher leaves out a `play_url` that is the same URL).
  const followsAudioUrl = data.play_url === undefined && changed("audio_url");
  if (changed("play_url") || changed("play_source") || followsAudioUrl) imsSetSource(card);
  imsPlayable(card);
  imsWaveState(card);
  if (changed("lyrics") || changed("line_times")) {
    imsLyricLines(ims.lyrics.querySelector("pre"), data.lyrics || "", data.line_times);
    ims.lyrics.hidden = !data.lyrics;
    imsSungLine(card);
  }
  if (changed("fail_reason")) {
    ims.failure.textContent = data.fail_reason || "";
    ims.failure.hidden = !data.fail_reason;
  }
  const actionKey = JSON.stringify([data.actions, data.favourite, data.kept]);
  if (actionKey !== ims.actionKey) {
    ims.actionKey = actionKey;
    const buttons = (data.actions || []).map((kind) => {
      let label = kind === "favourite" && data.favourite ? "Remove from favourites" : IMS_ACTION_LABELS[kind] || kind;
      if (kind === "keep" && data.kept) label = "This take is kept";
      const button = imsButton(kind, label, () => {
        if (kind === "copy_id" && navigator.clipboard) navigator.clipboard.writeText(ims.data.id).catch(() => {});
        ims.send({ kind, id: ims.data.id });
      });
      button.dataset.action = kind;
      button.classList.add("ims-labelled");
      button.appendChild(imsEl("span", "ims-button-word", kind === "keep" && data.kept ? "Kept" : IMS_ACTION_WORDS[kind] || kind));
      if (kind === "favourite") button.setAttribute("aria-pressed", String(Boolean(data.favourite)));
      if (kind === "keep") button.setAttribute("aria-pressed", String(Boolean(data.kept)));
      return button;
    });
    ims.actions.replaceChildren(...buttons);
  }
  const note = data.note || data.archived_path_label || "";
  ims.note.textContent = note;
  ims.note.hidden = !note;
  ims.note.title = !data.note && data.archived_path ? data.archived_path : ""; // the file's name shown, its full path on hover
  card.classList.toggle("ims-kept", Boolean(data.kept));
  imsDrawWave(card);
  imsUpdateTime(card);
  return card;
}

/** The URL a card's player loads: Python's `play_url` (unless it failed here), else the kernel's bytes once
 *  fetched for its `play_source` (a blob: URL), else none (a press asks the kernel). */
function imsCardSrc(card) {
  const { data, send, failedUrl } = card._ims;
  const url = data.play_url === undefined ? data.audio_url : data.play_url;
  const failed = url === failedUrl || Boolean(send && send.failedUrls && send.failedUrls.has(url));
  if (url && !failed) return url;
  const kernel = send && send.kernelAudio;
  return (kernel && data.play_source && kernel.loaded(data.play_source)) || null;
}

function imsPlayable(card) {
  const { data, send } = card._ims;
  const playable = Boolean(imsCardSrc(card) || (data.play_source && send && send.kernelAudio));
  card.classList.toggle("ims-playable", playable);
  card._ims.play.disabled = !playable;
}

/** Point the card's player at its source; a file that replaces another (the final after the preview) resumes. */
function imsSetSource(card) {
  const { audio } = card._ims;
  const next = imsCardSrc(card);
  if (next && audio.getAttribute("src") === next) return;
  const at = audio.currentTime;
  const wasPlaying = !audio.paused;
  if (next) {
    audio.src = next;
    if (at) audio.addEventListener("loadedmetadata", () => { audio.currentTime = at; if (wasPlaying) audio.play().catch(() => {}); }, { once: true });
  } else {
    audio.pause();
    audio.removeAttribute("src");
    audio.load();
  }
}

/** Ask the kernel for the card's bytes (its opaque `play_source`) and put them in its own player as a blob: URL;
 *  `play` (a press) plays them. Resolves once they are in the player (never rejects: a refusal is said on the card). */
function imsKernelPlay(card, play = true) {
  const ims = card._ims;
  const kernel = ims.send && ims.send.kernelAudio;
  const source = ims.data.play_source;
  if (!kernel || !source) return Promise.resolve();
  if (play) ims.wantPlay = true;
  ims.play.setAttribute("aria-busy", "true");
  return kernel.url(source).then(
    (url) => {
      ims.play.removeAttribute("aria-busy");
      if (ims.data.play_source !== source) return;
      if (ims.audio.getAttribute("src") !== url) ims.audio.src = url;
      imsPlayable(card);
      if (ims.wantPlay) ims.audio.play().catch(() => {});
    },
    (error) => {
      ims.play.removeAttribute("aria-busy");
      ims.note.textContent = String((error && error.message) || error).split("\n")[0];
      ims.note.hidden = false;
    },
  );
}

/** A `send(message)` for song cards of a view on `model`, whose cards can ask the kernel for their audio
 *  (`send.kernelAudio`); call `send.release()` when the view is destroyed (its blob: URLs are released). */
function imsCardSender(model) {
  const send = (message) => model.send(message);
  send.kernelAudio = imsKernelAudio(model);
  send.failedUrls = new Set(); // URLs that did not load in this view: not tried again when a card is redrawn
  send.release = () => send.kernelAudio.release();
  return send;
}

/** Release a card's observers (call before dropping it from the page). */
function disposeSongCard(card) {
  if (card._ims && card._ims.resize) card._ims.resize.disconnect();
  if (card._ims) card._ims.audio.pause();
}

/**
 * The takes of one paid call side by side ("Take 1" / "Take 2"), in `container`; returns the group.
 * `cards` are card dicts of the same `call`; update with the same function (pass the group as `existing`).
 */
function renderCallGroup(container, cards, send, existing) {
  const group = existing || imsEl("div", "ims-call");
  if (!existing) {
    group._cards = new Map();
    container.appendChild(group);
  }
  group.dataset.call = (cards[0] && cards[0].call) || "";
  const seen = new Set();
  for (const data of cards) {
    seen.add(data.id);
    const card = group._cards.get(data.id);
    if (card) updateSongCard(card, data, send);
    else group._cards.set(data.id, renderSongCard(group, data, send));
  }
  for (const [id, card] of group._cards) {
    if (!seen.has(id)) {
      disposeSongCard(card);
      card.remove();
      group._cards.delete(id);
    }
  }
  // keep takes in order
  const ordered = [...group._cards.values()].sort((a, b) => Number(a.dataset.take) - Number(b.dataset.take));
  if (ordered.some((card, i) => group.children[i] !== card)) group.replaceChildren(...ordered);
  group.classList.toggle("ims-call-pair", ordered.length > 1);
  return group;
}

/** Dispose every card of a group (or of any element holding cards). */
function disposeCards(root) {
  for (const card of root.querySelectorAll(".ipymusicgen-song")) disposeSongCard(card);
}

/**
 * Audio the kernel hands over the widget channel (widgets/audio_channel.py): the page knows a player only by an
 * opaque source name. `url(source)` asks the kernel for its bytes once ({kind: "audio", source}) and resolves to
 * a blob: URL; `keep(sources)` releases the URLs of every other source (a new round); `release()` releases them
 * all and stops listening (call it when the view is destroyed).
 */
function imsKernelAudio(model) {
  const asked = new Map(); // source -> { promise, resolve, reject, url }
  const answer = (message, buffers) => {
    if (!message || message.kind !== "audio" || !asked.has(message.source)) return;
    const entry = asked.get(message.source);
    if (entry.url) return;
    if (message.error || !buffers || !buffers.length) {
      asked.delete(message.source); // a later press asks again
      entry.reject(new Error(message.error || "no audio came"));
      return;
    }
    entry.url = URL.createObjectURL(new Blob(buffers, { type: message.type || "application/octet-stream" }));
    entry.resolve(entry.url);
  };
  model.on("msg:custom", answer);
  const drop = (source) => {
    const entry = asked.get(source);
    if (entry && entry.url) URL.revokeObjectURL(entry.url);
    if (entry && !entry.url) entry.reject(new Error("released"));
    asked.delete(source);
  };
  return {
    url(source) {
      if (!asked.has(source)) {
        const entry = { url: null };
        entry.promise = new Promise((resolve, reject) => Object.assign(entry, { resolve, reject }));
        entry.promise.catch(() => {}); // a released or refused request is no page error
        asked.set(source, entry);
        model.send({ kind: "audio", source });
      }
      return asked.get(source).promise;
    },
    loaded(source) {
      const entry = asked.get(source);
      return entry ? entry.url : null;
    },
    keep(sources) {
      for (const source of [...asked.keys()]) if (!sources.includes(source)) drop(source);
    },
    release() {
      model.off("msg:custom", answer);
      for (const source of [...asked.keys()]) drop(source);
    },
  };
}

// The grid's and batch view's numbered updates (docs/frontend.md): `data` is synced whole only for a new shape (or
// on {kind: "resync"}); each change after that is a custom message {kind: "patch", version, set, ...}. `states` (a
// WeakMap) holds each model's data as patched, shared by the model's views; `copy` makes a patchable copy of it.
function imsPatchedData(states, model, copy) {
  const synced = model.get("data") || {};
  const known = states.get(model);
  if (known && (known.version ?? 0) >= (synced.version ?? 0)) return known;
  const data = copy(synced);
  states.set(model, data);
  return data;
}

// A view's "msg:custom" handler for those patches: the next version is applied (`set` merged, then
// `change(data, message)` writes the view's own part), an older one was applied already by another view of the
// model, and a gap asks for "resync" and draws nothing; `drawn(message)` redraws after a patch that was no gap.
function imsPatchHandler(model, states, copy, change, send, drawn) {
  return (message) => {
    if (!message || message.kind !== "patch") return;
    const data = imsPatchedData(states, model, copy);
    const version = data.version ?? 0;
    if (message.version > version + 1) {
      send({ kind: "resync" }); // a patch was missed (no view was drawn when it came): ask for the whole data
      return;
    }
    if (message.version === version + 1) {
      Object.assign(data, message.set || {});
      change(data, message);
      data.version = message.version;
    } // else another view of this model applied it already
    drawn(message);
  };
}
