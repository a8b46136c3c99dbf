// The console's live parts: follows the page's server-sent events and redraws the worlds table, or a
// world's figures, charts and call stream. Text from the services goes in with textContent, never as markup.
"use strict";
(function () {
  const stream = document.body.dataset.stream;
  if (!stream) return;
  const kind = document.body.dataset.page;
  const status = document.getElementById("status");
  const initial = JSON.parse(document.getElementById("initial").textContent);
  const KEEP_ROWS = 200;
  const KEEP_SAMPLES = 600;
  const TIERS = ["clotho", "lachesis", "atropos"];
  const COLORS = { clotho: "#c0392b", lachesis: "#2874a6", atropos: "#7d8c8d" };

  const int = (n) => Number(n || 0).toLocaleString("en-US");
  const usd = (v) => "$" + Number(v || 0).toFixed(4);
  const pct = (a, b) => (b ? " (" + ((100 * a) / b).toFixed(3) + "%)" : "");
  const tiers = (t) => TIERS.map((k) => k + " " + int((t || {})[k])).join(" · ");

  function cell(content) {
    const td = document.createElement("td");
    if (content instanceof Node) td.append(content);
    else td.textContent = content;
    return td;
  }
  function link(href, text) {
    const a = document.createElement("a");
    a.href = href;
    a.textContent = text;
    return a;
  }
  function badge(text, cls) {
    const span = document.createElement("span");
    span.className = "badge " + cls;
    span.textContent = text;
    return span;
  }
  const spendTokens = (w) => int(w.consumed_tokens) + " / " + int(w.cap_tokens) + pct(w.consumed_tokens, w.cap_tokens);
  const spendUsd = (w) => usd(w.usd) + " / ≈" + usd(w.cap_usd);

  // -- every world ----------------------------------------------------------------------------------
  function worldRow(w) {
    const tr = document.createElement("tr");
    tr.dataset.world = w.world_id;
    tr.append(
      cell(link("/worlds/" + encodeURIComponent(w.world_id), w.world_id)),
      cell(spendTokens(w)),
      cell(spendUsd(w)),
      cell(int(w.calls)),
      cell(Number(w.calls_per_s).toFixed(2)),
      cell(tiers(w.tiers)),
      cell(int(w.killed)),
      cell(int(w.blocked)),
      cell(w.controls.join("; ") || "none"),
    );
    tr.children[3].dataset.field = "calls";
    return tr;
  }
  function drawWorlds(list) {
    document.getElementById("worlds-body").replaceChildren(...list.map(worldRow));
  }

  // -- one world ------------------------------------------------------------------------------------
  const worldId = initial.world_id;
  const samples = (initial.history || []).slice(-KEEP_SAMPLES);
  let lastRow = 0;

  function drawFigures(w) {
    if (!w) return;
    const shown = {
      spend_tokens: spendTokens(w),
      spend_usd: spendUsd(w),
      calls: int(w.calls),
      calls_per_s: Number(w.calls_per_s).toFixed(2),
      tiers: tiers(w.tiers),
      killed: int(w.killed),
      blocked: int(w.blocked),
      controls: w.controls.join("; ") || "none",
    };
    for (const [field, text] of Object.entries(shown)) {
      const node = document.querySelector('[data-field="' + field + '"]');
      if (node) node.textContent = text;
    }
  }

  function polyline(svg, points, color) {
    const line = document.createElementNS("http://www.w3.org/2000/svg", "polyline");
    line.setAttribute("points", points.map((p) => p[0].toFixed(1) + "," + p[1].toFixed(1)).join(" "));
    line.setAttribute("fill", "none");
    line.setAttribute("stroke", color);
    line.setAttribute("stroke-width", "2");
    svg.append(line);
  }
  function label(svg, x, y, text, color) {
    const t = document.createElementNS("http://www.w3.org/2000/svg", "text");
    t.setAttribute("x", x);
    t.setAttribute("y", y);
    t.setAttribute("fill", color);
    t.setAttribute("font-size", "11");
    t.textContent = text;
    svg.append(t);
  }
  function chart(id, series, caption) {
    const svg = document.getElementById(id);
    if (!svg) return;
    svg.replaceChildren();
    if (samples.length < 2) {
      label(svg, 10, 80, "waiting for samples…", "#555");
      return;
    }
    const t0 = samples[0].t, t1 = samples[samples.length - 1].t;
    const top = Math.max(1, ...series.flatMap((s) => s.values));
    const x = (t) => 40 + ((t - t0) / Math.max(1, t1 - t0)) * 550;
    const y = (v) => 145 - (v / top) * 130;
    for (const s of series) polyline(svg, samples.map((p, i) => [x(p.t), y(s.values[i])]), s.color);
    label(svg, 2, 14, int(top), "#555");
    label(svg, 2, 150, "0", "#555");
    series.forEach((s, i) => label(svg, 60 + i * 120, 158, s.name, s.color));
    if (caption) label(svg, 300, 14, caption, "#555");
  }
  function drawCharts() {
    chart(
      "tiers-chart",
      TIERS.map((k) => ({ name: k, color: COLORS[k], values: samples.map((p) => (p.tiers || {})[k] || 0) })),
    );
    const last = samples[samples.length - 1] || {};
    const near = samples.some((p) => p.cap && p.tokens * 2 >= p.cap);
    const series = [{ name: "spent", color: "#1e8449", values: samples.map((p) => p.tokens) }];
    if (near) series.push({ name: "cap", color: "#c0392b", values: samples.map((p) => p.cap) });
    chart("spend-chart", series, last.cap ? "cap " + int(last.cap) + pct(last.tokens, last.cap) : "");
  }

  function streamRow(row) {
    const tr = document.createElement("tr");
    tr.dataset.kind = row.kind;
    tr.dataset.ori = row.ori_id;
    tr.dataset.number = row.number;
    tr.className = row.kind;
    const when = new Date(row.at_ms).toISOString().slice(11, 23);
    const ori = row.ori_id
      ? link("/worlds/" + encodeURIComponent(worldId) + "/ori/" + encodeURIComponent(row.ori_id), row.ori_id)
      : "";
    const source = row.source ? badge(row.source, row.source) : "";
    const detail = row.kind === "call" ? row.said || row.text : row.text;
    tr.append(
      cell(when),
      cell(ori),
      cell(row.cause),
      cell(row.tier),
      cell(row.outcome),
      cell(row.kind === "call" ? row.latency_ms.toFixed(1) + " ms" : ""),
      cell(row.kind === "call" ? usd(row.micro_usd / 1e6) : ""),
      cell(source),
      cell(detail),
    );
    return tr;
  }
  function addRows(rows) {
    const body = document.getElementById("stream-body");
    const speech = document.getElementById("speech-body");
    for (const row of rows) {
      if (row.number <= lastRow) continue;
      lastRow = row.number;
      body.prepend(streamRow(row));
      if (row.said) {
        const li = document.createElement("li");
        li.append(document.createTextNode(row.ori_id + ": " + row.said + " "));
        if (row.source === "offline") li.append(badge("offline", "offline"));
        speech.prepend(li);
      }
      if (row.source === "offline") document.getElementById("offline-notice").hidden = false;
    }
    while (body.children.length > KEEP_ROWS) body.lastElementChild.remove();
    while (speech.children.length > KEEP_ROWS) speech.lastElementChild.remove();
  }

  // -- following the stream -------------------------------------------------------------------------
  if (kind === "worlds") drawWorlds(initial.worlds || []);
  if (kind === "world") {
    drawFigures(initial.world);
    drawCharts();
  }
  const events = new EventSource(stream);
  events.onmessage = (message) => {
    const update = JSON.parse(message.data);
    let unsent = update.unsent ? " · " + int(update.unsent) + " calls not shown (too many at once)" : "";
    status.textContent = update.error || "live · " + new Date().toLocaleTimeString() + unsent;
    status.classList.toggle("error", Boolean(update.error));
    if (kind === "worlds") drawWorlds(update.worlds);
    if (kind === "world") {
      drawFigures(update.world);
      if (update.sample && (!samples.length || update.sample.t > samples[samples.length - 1].t)) {
        samples.push(update.sample);
        if (samples.length > KEEP_SAMPLES) samples.shift();
        drawCharts();
      }
      addRows(update.rows || []);
    }
  };
  events.onerror = () => {
    status.textContent = "reconnecting…";
  };
})();
